"""Configuration of ``collect-rollouts`` and its subcommands (``merge``, ``verify``, ``diagnose``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from prime_rl.clients.config import RetryPolicy
from prime_rl.clients.server_metrics import ServerMetricsConfig
from prime_rl.config import BaseConfig, BaseUrl, StrictModel
from prime_rl.envs.config import EpisodeConfig, VerifyConfig

DEFAULT_PRICES: dict[str, dict[str, float]] = {
    # USD per 1M tokens, list prices as of 2025; override or extend with --prices
    "gpt-4o-mini": {"input_per_1m": 0.15, "output_per_1m": 0.60},
    "gpt-4o": {"input_per_1m": 2.50, "output_per_1m": 10.00},
}


class Price(StrictModel):
    """What one model costs, in currency units per million tokens."""

    input_per_1m: float = Field(ge=0)
    """Price of 1M input (prompt) tokens."""

    output_per_1m: float = Field(ge=0)
    """Price of 1M output (completion) tokens."""


class ResponsesCreateParams(StrictModel):
    """What each request asks for. Set in a config file and override single keys on the command
    line: ``--responses_create_params.temperature 0.3`` keeps the file's model and max tokens."""

    model: str | None = None
    """Model name sent to the server; unset: the first model the server lists at /v1/models."""

    max_output_tokens: int = Field(default=512, ge=1)
    """Most tokens generated per sample (sent as max_completion_tokens)."""

    temperature: float = Field(default=1.0, ge=0)
    """Sampling temperature."""

    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling mass; unset: the server's default."""

    seed: int | None = None
    """Sampling seed (combined with task and repeat index so repeats differ); unset: random."""

    stop: list[str] | None = None
    """Stop strings."""

    extra_body: dict[str, Any] = {}
    """Any other request fields, sent as given (e.g. {"service_tier": "flex"})."""


class RetryConfig(RetryPolicy):
    """Timeouts, retries and the reaction to rate limits: the shared client retry shape
    (connect_timeout_s, max_retries, backoff_s, backoff_max_s) plus the collector's read timeout,
    429 handling and give-up rules."""

    read_timeout_s: float = Field(default=600.0, gt=0)
    """Seconds a request may wait for its answer."""

    max_retries: int = Field(default=4, ge=0)
    """Retries of one request on connection errors, timeouts and 5xx answers (then it is a failure)."""

    max_429_retries: int = Field(default=50, ge=0)
    """Retries of one request answered 429 (rate limits are expected; this bounds a stuck limit)."""

    default_retry_after_s: float = Field(default=1.0, ge=0)
    """First wait of a request answered 429 without Retry-After; it doubles (with jitter, up to
    backoff_max_s) each time that request is refused again. A Retry-After is never cut short."""

    rate_limit_tolerance: float = Field(default=0.25, ge=0, lt=1)
    """Share of 429s in a window of answers that leaves the parallelism where it is; above it the
    parallelism is cut in proportion (at most halved per window), and it grows back in windows at
    or below it."""

    min_parallel: int = Field(default=1, ge=1)
    """Parallelism never drops below this on 429s."""

    max_attempts: int = Field(default=3, ge=1)
    """Runs that may try a (task, repeat) pair that keeps failing; after that it is skipped and
    left in the failures file (raise this to try again)."""


class VerifySettings(VerifyConfig):
    """Scoring of each response with the environment's verifier."""

    enabled: bool = True
    """Score as responses arrive; --no-verify collects unscored records that
    `collect-rollouts verify` scores later."""

    workers: int = Field(default=2, ge=0)
    """Verifier processes (each call has a timeout; a hung or crashed verifier is replaced).
    0 scores in the collector's own process: lowest overhead, for fast verifiers only."""

    timeout_s: float = Field(default=60.0, gt=0)
    """Seconds one score() call may take; a slower one is recorded as a verifier failure."""


class RayConfig(StrictModel):
    """Collection on a Ray cluster: ``--ray`` (a local Ray, or the cluster ``RAY_ADDRESS`` names)
    or ``--ray ADDRESS`` (``HOST:PORT`` of a running cluster's head, ``auto`` or ``local``).
    Needs the ``ray`` extra (``pip install 'prime-rl[ray]'``) and prime-rl on every node. The
    collector stays the only writer of the output (same records, siblings, resume and exit
    codes); workers (Ray actors, ``workers_per_node`` on every node with ``num_cpus`` free) send
    the requests and score the responses. ``num_samples_in_parallel`` is the most requests in
    flight against one set of servers: the workers that use the same base URLs share it."""

    enabled: bool = False
    """Collect on Ray (``--ray`` sets it; ``--ray ADDRESS`` sets the address too)."""

    address: str | None = None
    """The cluster: ``HOST:PORT`` of its head (GCS), ``auto`` (one started on this machine with
    ``ray start``) or ``local`` (a new Ray on this machine, gone with the run). Unset:
    ``RAY_ADDRESS``, else a cluster ``ray start`` began on this machine, else a new local Ray
    (what ``ray.init()`` does)."""

    workers_per_node: int = Field(default=1, ge=1)
    """Workers on each node (one worker's event loop sends thousands of requests a second; more
    help when scoring inline, ``--verify.workers 0``, is the bound)."""

    num_cpus: float = Field(default=1.0, ge=0)
    """CPUs each worker reserves on its node; nodes with fewer free get no worker (0: place a
    worker on every node, a head started with ``--num-cpus 0`` too)."""

    node_base_urls: dict[str, list[BaseUrl]] = {}
    """The servers nearest each node: node IP, hostname or Ray node ID -> base URLs its workers
    send to (JSON on the command line). A node not listed uses ``base_urls``."""

    window: int | None = Field(default=None, ge=1)
    """Pairs handed to a worker and not yet back, at most (its queue, in flight and being scored);
    unset: twice its share of the parallelism plus twice verify.workers plus 16, as the
    single-process collector admits. What a lost worker had unfinished is handed out again."""

    max_worker_restarts: int = Field(default=3, ge=0)
    """Workers started on a node after one died there while the node lives (a lost node's work
    goes to the others; a node that joins later gets workers too)."""

    max_pair_losses: int = Field(default=3, ge=1)
    """Workers a (task, repeat) pair may be lost with (a worker or node died while it was
    unfinished) before it goes to the failures file with kind WorkerLost, so that one pair that
    crashes its worker cannot take every worker down."""

    start_timeout_s: float = Field(default=120.0, gt=0)
    """Seconds a worker may take to start (placed, imported, its servers' model listed)."""

    no_worker_timeout_s: float = Field(default=120.0, gt=0)
    """With work left and no worker alive (none could be started), the run stops after this
    long with exit code 1; every record written so far stays (rerun to resume)."""

    check_interval_s: float = Field(default=5.0, gt=0)
    """How often the cluster's nodes are looked at (new nodes get workers, lost workers are
    replaced)."""

    @model_validator(mode="before")
    @classmethod
    def _from_flag(cls, data: Any) -> Any:
        if isinstance(data, bool):  # --ray / --no-ray
            return {"enabled": data}
        if isinstance(data, str):
            if data.lower() in ("true", "false", "1", "0"):
                return {"enabled": data.lower() in ("true", "1")}
            return {"enabled": True, "address": data}
        if isinstance(data, dict) and data.get("address") is not None:
            data = {**data, "enabled": True}
        return data

    @field_validator("node_base_urls")
    @classmethod
    def _check_node_urls(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        empty = [node for node, urls in value.items() if not urls]
        if empty:
            raise ValueError(f"no base URL for node {', '.join(empty)} (leave a node out to use base_urls)")
        return value

    @field_validator("address")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value is not None and value.startswith("ray://"):
            raise ValueError(
                "Ray Client addresses (ray://) are not supported: run collect-rollouts on a node of "
                "the cluster with --ray HOST:PORT (the head's GCS address) or --ray auto"
            )
        return value


def _is_address(value: str) -> bool:
    return (
        not value.startswith("-") and not value.lstrip().startswith("{") and value.lower() not in _FLAG_WORDS
    )


_FLAG_WORDS = ("true", "false", "1", "0", "yes", "no")


def ray_argv(argv: list[str]) -> list[str]:
    """``--ray ADDRESS`` (or ``--ray=ADDRESS``) -> ``--ray.address ADDRESS``: the option takes an
    optional bare value, which the generic parser would read as the block's JSON. ``--ray``
    alone, ``--ray true|false`` and ``--ray '{...}'`` pass unchanged."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        nxt = argv[i + 1] if i + 1 < len(argv) else None
        name, eq, value = token.partition("=")
        if name == "--ray" and eq and _is_address(value):
            out += ["--ray.address", value]
        elif token == "--ray" and nxt is not None and _is_address(nxt):
            out += ["--ray.address", nxt]
            i += 1
        else:
            out.append(token)
        i += 1
    return out


class SourceConfig(BaseConfig):
    """Options shared by every subcommand that reads or writes rollout files."""

    env: str | None = None
    """Environment whose verifier scores the responses (toy, math, reasoning_gym or module:Class);
    it also says which task fields are required. Unset: records are collected unscored."""

    env_options: dict[str, Any] = {}
    """Options of the environment (JSON on the command line)."""

    verify: VerifySettings = VerifySettings()
    """Verification."""

    episode: EpisodeConfig = EpisodeConfig()
    """Multi-turn environments (``--env`` with more than one turn): each later turn is one more
    chat request; turn and time limits, and how tool calls are read from the text when the server
    has no tool-call parser (``tokenizer`` is not used here)."""

    strict: bool = False
    """Fail on the first malformed input line instead of reporting and skipping it."""

    pass_threshold: float = 1.0
    """A sample passes (for pass@k and majority@k) when its reward is at least this."""

    progress: bool = True
    """Show the progress bar (stderr)."""

    log_file: Path | None = None
    """Where the [collect] timing lines go; default: <output stem>_collect.log beside the output."""

    @field_validator("verify", mode="before")
    @classmethod
    def _bare_flag(cls, value: Any) -> Any:
        if isinstance(value, bool):  # --verify / --no-verify
            return {"enabled": value}
        return value


class CollectConfig(SourceConfig):
    """collect-rollouts: read tasks from a JSONL file, sample each num_repeats times from one or
    more OpenAI-compatible servers, score each response, and append one JSON line per sample.
    Re-running with the same arguments resumes: pairs already in the output are skipped.
    Subcommands: `collect-rollouts merge`, `collect-rollouts verify`, `collect-rollouts diagnose`
    (each has its own --help)."""

    process: ClassVar[str] = "collect-rollouts"
    cli_aliases: ClassVar[dict[str, str]] = {
        "input": "input_jsonl_fpath",
        "output": "output_jsonl_fpath",
        "parallel": "num_samples_in_parallel",
        "model": "responses_create_params.model",
    }

    input_jsonl_fpath: Path
    """Task file: one JSON object per line, with a prompt (prompt, messages,
    responses_create_params.input or question) and the fields the verifier needs."""

    output_jsonl_fpath: Path
    """Output file, appended to (one record per sample). Siblings: <stem>_failures.jsonl,
    <stem>_aggregate_metrics.json, <stem>_collect.log."""

    limit: int | None = Field(default=None, ge=1)
    """Use only the first N valid tasks of the file (before sharding); unset: all."""

    max_bad_lines: int | None = Field(default=1000, ge=0)
    """Stop before sending any request when the task file has more bad lines than this (blank,
    not JSON, no or an empty prompt, a field the env needs missing): such an input is more likely
    the wrong file than a few typos. Every bad line is listed in <stem>_rejects.jsonl either way.
    none: no limit; --strict stops at the first bad line."""

    num_repeats: int = Field(default=1, ge=1)
    """Samples per task (pass@k and majority@k are reported when > 1)."""

    num_samples_in_parallel: int = Field(default=16, ge=1)
    """Most requests in flight (lowered automatically on 429, then raised back)."""

    shard: str | None = None
    """'i/n': take only tasks whose index is i modulo n, so n machines split one file."""

    base_urls: list[BaseUrl] = Field(default_factory=lambda: ["http://127.0.0.1:8000"], min_length=1)
    """Base URLs of OpenAI-compatible servers (with or without /v1); requests go to the least
    loaded one that is up."""

    api_key: SecretStr | None = None
    """API key for a hosted server. Unset: read from the env var named by api_key_env, then from
    env_file. Never logged or written out."""

    api_key_env: str = "OPENAI_API_KEY"
    """Environment variable (and env_file key) holding the API key."""

    env_file: Path = Path("env.yaml")
    """YAML file of secrets (KEY: value) read when present."""

    responses_create_params: ResponsesCreateParams = ResponsesCreateParams()
    """Request parameters."""

    api: Literal["chat", "responses"] = "chat"
    """Which OpenAI API to call: ``chat`` (``/v1/chat/completions``) or ``responses``
    (``/v1/responses``; vLLM serves both). The records are the same, except that the Responses
    API gives no token ids; tools and tool calls are converted between the two shapes."""

    token_ids: Literal["auto", "always", "never"] = "auto"
    """Ask for token ids (vLLM's return_token_ids). auto: ask, and stop asking if the server rejects
    the field (hosted APIs do)."""

    retry: RetryConfig = RetryConfig()
    """Timeouts, retries, rate limits."""

    server_metrics: ServerMetricsConfig = ServerMetricsConfig()
    """Each server's load (requests running and waiting, KV-cache use, preemptions, queue time)
    scraped from its /metrics into ``[server] metrics`` lines in the collect log. A server without
    vLLM's metrics (a hosted API: 404) is asked once; ``interval_s`` 0 turns it off."""

    prices: dict[str, Price] = Field(
        default_factory=lambda: {k: Price(**v) for k, v in DEFAULT_PRICES.items()}
    )
    """Price table by model name (exact, else longest prefix): cost so far and projected total.
    Models without a price show no cost."""

    allow_param_change: bool = False
    """Resume into an output collected with other request parameters (default: refuse, so one
    file never mixes models or temperatures unnoticed)."""

    estimate: bool = False
    """After the run (use with --limit), extrapolate cost and time to the whole file and write
    <stem>_estimate.json."""

    progress_interval_s: float = Field(default=0.5, gt=0)
    """Seconds between progress refreshes."""

    ray: RayConfig = RayConfig()
    """Collection on a Ray cluster: ``--ray`` (``RAY_ADDRESS``, a cluster started on this machine,
    else a local Ray) or ``--ray ADDRESS`` (``HOST:PORT`` of the head, ``auto``, ``local``); needs
    the ``ray`` extra on every node. Workers (Ray actors) on every node send the requests, each to
    its node's servers (``ray.node_base_urls``), and score the answers; this process writes every
    record once, as without Ray, and resumes the same way. ``num_samples_in_parallel`` is per set
    of servers: the workers that send to the same base URLs split it."""

    @field_validator("shard")
    @classmethod
    def _check_shard(cls, value: str | None) -> str | None:
        if value is None:
            return value
        i, sep, n = value.partition("/")
        if not sep or not i.strip().isdigit() or not n.strip().isdigit() or not 0 <= int(i) < int(n):
            raise ValueError(f"shard {value!r} must be 'i/n' with 0 <= i < n, e.g. '0/4'")
        return f"{int(i)}/{int(n)}"

    @model_validator(mode="after")
    def _check_files(self) -> CollectConfig:
        if self.input_jsonl_fpath.resolve() == self.output_jsonl_fpath.resolve():
            raise ValueError("input_jsonl_fpath and output_jsonl_fpath are the same file")
        if self.retry.min_parallel > self.num_samples_in_parallel:
            raise ValueError("retry.min_parallel is larger than num_samples_in_parallel")
        return self

    @property
    def shard_index(self) -> tuple[int, int]:
        if self.shard is None:
            return 0, 1
        i, _, n = self.shard.partition("/")
        return int(i), int(n)


class MergeConfig(SourceConfig):
    """collect-rollouts merge: combine output files (shards, or interrupted runs) into one,
    keeping each (task, repeat) once, sorted, and recompute the aggregate metrics.
    Usage: collect-rollouts merge --output merged.jsonl shard0.jsonl shard1.jsonl ..."""

    process: ClassVar[str] = "collect-rollouts merge"
    cli_aliases: ClassVar[dict[str, str]] = {"output": "output_jsonl_fpath"}
    positional_field: ClassVar[str | None] = "inputs"

    inputs: list[Path] = Field(min_length=1)
    """Files to merge (positional arguments, or --inputs a.jsonl,b.jsonl)."""

    output_jsonl_fpath: Path
    """Merged file, written atomically (it must not be one of the inputs). An existing file is
    replaced only when it holds rollout records (an earlier merge's) or nothing; any other file is
    refused, left as it is."""

    @model_validator(mode="after")
    def _check_output(self) -> MergeConfig:
        if self.output_jsonl_fpath.resolve() in {p.resolve() for p in self.inputs}:
            raise ValueError(f"output {self.output_jsonl_fpath} is also an input; write to a new file")
        return self


class VerifyFileConfig(SourceConfig):
    """collect-rollouts verify (also: verify-rollouts): score a file collected with --no-verify
    (or re-score one) with many verifier processes; resumable like collection."""

    process: ClassVar[str] = "verify-rollouts"
    cli_aliases: ClassVar[dict[str, str]] = {"input": "input_jsonl_fpath", "output": "output_jsonl_fpath"}

    input_jsonl_fpath: Path
    """Records to score (the output of collect-rollouts)."""

    output_jsonl_fpath: Path
    """Scored records, appended to; pairs already in it are skipped."""

    num_samples_in_parallel: int = Field(default=64, ge=1)
    """Scores in flight (bounded in practice by verify.workers)."""

    rescore: bool = False
    """Score records that already carry a reward too (default: copy them through)."""

    @model_validator(mode="after")
    def _check(self) -> VerifyFileConfig:
        if self.env is None:
            raise ValueError("env: verify needs --env NAME (the verifier to score with)")
        if self.input_jsonl_fpath.resolve() == self.output_jsonl_fpath.resolve():
            raise ValueError("input_jsonl_fpath and output_jsonl_fpath are the same file")
        return self


class DiagnoseConfig(CollectConfig):
    """collect-rollouts diagnose: collect the same small sample at low and at high parallelism and
    say what bounds throughput (model server, verifier, or network/rate limit). Outputs go to
    <output stem>_diagnose/ and never touch the output file itself."""

    process: ClassVar[str] = "collect-rollouts diagnose"

    low: int = Field(default=5, ge=1)
    """Parallelism of the first run."""

    high: int = Field(default=20, ge=1)
    """Parallelism of the second run."""

    limit: int | None = Field(default=20, ge=1)
    """Tasks in the sample."""

    @model_validator(mode="after")
    def _check_levels(self) -> DiagnoseConfig:
        if self.high <= self.low:
            raise ValueError(f"high ({self.high}) must be above low ({self.low})")
        if self.ray.enabled:
            raise ValueError("diagnose runs in one process: drop --ray")
        return self
