"""``collect-rollouts``: tasks in, scored samples out, resumable, observable, rate-limit aware.

For each selected task and each repeat not yet in the output (and not given up on), a request
goes to the least-loaded server under an :class:`AdaptiveLimiter`; the response is scored
(verifier processes, off the event loop) and written as one JSON line the moment it is done.
Retries: 5xx, connection errors and timeouts back off exponentially with jitter. A 429 makes
that request alone wait (backoff with jitter, never less than its Retry-After) while the others go
on; the parallelism moves once per window of answers, down only when more than
``retry.rate_limit_tolerance`` of them were 429s, then back up (:mod:`prime_rl.collect.limiter`).
Every request waits only when the server asks for it (a 503 with Retry-After, a 429 saying the
quota is used up). A pair whose retries run out goes
to ``<stem>_failures.jsonl`` and is tried again by the next run (``retry.max_attempts`` runs).
Each rollout logs ``[collect][<trace>] rollout.done ... dur_ms= queue_ms= gen_ms= verify_ms=``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from loguru import logger

from prime_rl.clients.backoff import backoff_delay
from prime_rl.clients.chat import ChatBackend, Completion, RateLimited, RequestError
from prime_rl.clients.server_metrics import ServerMetricsScraper
from prime_rl.collect.config import CollectConfig
from prime_rl.collect.episodes import add_episode, play_episode
from prime_rl.collect.limiter import AdaptiveLimiter
from prime_rl.collect.metrics import PriceTable, aggregate_file
from prime_rl.collect.progress import Progress
from prime_rl.collect.scoring import Scorer, apply_verdict
from prime_rl.collect.store import (
    AppendWriter,
    Key,
    OutputWriteError,
    aggregates_path,
    exclusive,
    failures_path,
    iter_records,
    read_failures,
    rejects_path,
    repair_output,
    scan_output,
    sibling,
)
from prime_rl.collect.tasks import Pairs, TaskSelection, check_bad_lines, iter_tasks, row_at, scan_tasks
from prime_rl.envs.registry import load_env
from prime_rl.logging import log_tagged
from prime_rl.paths import atomic_write_json
from prime_rl.tracing import new_trace_id

MAX_LISTED_ISSUES = 20


class CollectError(RuntimeError):
    """The run cannot start or go on (bad input under --strict, mismatched output, no server)."""


def resolve_api_key(cfg: CollectConfig) -> str | None:
    """--api_key, else the env var ``api_key_env``, else that key in ``env_file`` (never logged)."""
    if cfg.api_key is not None:
        return cfg.api_key.get_secret_value()
    if os.environ.get(cfg.api_key_env):
        return os.environ[cfg.api_key_env]
    if cfg.env_file.exists() and not cfg.env_file.is_file():  # a directory: it was silently skipped
        raise CollectError(f"env file {cfg.env_file}: not a file")
    if cfg.env_file.is_file():
        try:
            data = yaml.safe_load(cfg.env_file.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:  # the message may quote the file: keep only where it broke
            mark = getattr(e, "problem_mark", None)
            where = f" at line {mark.line + 1}" if mark is not None else ""
            raise CollectError(f"env file {cfg.env_file}: not valid YAML{where}") from None
        if not isinstance(data, dict):
            raise CollectError(f"env file {cfg.env_file}: expected KEY: value lines")
        value = data.get(cfg.api_key_env)
        return str(value) if value else None
    return None


def chat_backend(cfg: CollectConfig, api_key: str | None) -> ChatBackend:
    """The chat client of a run: its servers, timeouts and a connection pool a little larger
    than its parallelism."""
    return ChatBackend(
        cfg.base_urls,
        api_key=api_key,
        token_ids=cfg.token_ids,
        api=cfg.api,
        max_connections=cfg.num_samples_in_parallel + 8,
        connect_timeout_s=cfg.retry.connect_timeout_s,
        read_timeout_s=cfg.retry.read_timeout_s,
    )


def request_params(cfg: CollectConfig, model: str) -> dict[str, Any]:
    """The recorded sampling parameters (the request adds messages and a per-sample seed)."""
    p = cfg.responses_create_params
    params: dict[str, Any] = {
        "model": model,
        "max_output_tokens": p.max_output_tokens,
        "temperature": p.temperature,
    }
    for name in ("top_p", "seed", "stop"):
        if getattr(p, name) is not None:
            params[name] = getattr(p, name)
    if p.extra_body:
        params["extra_body"] = p.extra_body
    return params


SAMPLING_FIELDS = ("max_output_tokens", "temperature", "top_p", "stop", "seed")
"""Fields of a task's ``responses_create_params`` that replace the run's sampling parameters."""
NOT_SENT = ("input", "model")
"""Fields of a task's ``responses_create_params`` that are not request options: ``input`` is the
prompt; the model is the run's (the servers serve it)."""


def task_params(params: dict[str, Any], row: dict[str, Any]) -> dict[str, Any]:
    """The run's parameters with the task's own ``responses_create_params`` over them, as NeMo Gym
    applies them: sampling fields replace the run's; any other field (``tools``, ``tool_choice``,
    ``parallel_tool_calls``, vLLM's ``structured_outputs``, ...) is sent with the request."""
    own = row.get("responses_create_params")
    if not isinstance(own, dict) or not set(own) - set(NOT_SENT):
        return params
    merged = dict(params)
    extra = dict(params.get("extra_body", {}))
    for key, value in own.items():
        if key in NOT_SENT:
            continue
        if key in SAMPLING_FIELDS:
            merged[key] = value
        else:
            extra[key] = value
    if extra:
        merged["extra_body"] = extra
    return merged


def chat_tool(tool: Any) -> Any:
    """A tool in the Responses API's flat shape (``{"type": "function", "name", "parameters"}``,
    NeMo Gym's rows) in the chat shape (``{"type": "function", "function": {...}}``)."""
    if (
        isinstance(tool, dict)
        and tool.get("type") == "function"
        and "function" not in tool
        and "name" in tool
    ):
        return {"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}}
    return tool


def chat_tool_choice(choice: Any) -> Any:
    """``{"type": "function", "name": N}`` (Responses) -> ``{"type": "function", "function": {"name": N}}``."""
    if isinstance(choice, dict) and choice.get("type") == "function" and "name" in choice:
        return {"type": "function", "function": {"name": choice["name"]}}
    return choice


def request_body(
    params: dict[str, Any], messages: list[dict[str, Any]], task_index: int, repeat: int
) -> dict:
    body: dict[str, Any] = {
        "model": params["model"],
        "messages": messages,
        "temperature": params["temperature"],
        "max_completion_tokens": params["max_output_tokens"],
    }
    if "top_p" in params:
        body["top_p"] = params["top_p"]
    if "stop" in params:
        body["stop"] = params["stop"]
    if "seed" in params:
        body["seed"] = (params["seed"] * 1_000_003 + task_index * 1_009 + repeat) % (2**31)
    body.update(params.get("extra_body", {}))
    if isinstance(body.get("tools"), list):
        body["tools"] = [chat_tool(t) for t in body["tools"]]
    if "tool_choice" in body:
        body["tool_choice"] = chat_tool_choice(body["tool_choice"])
    return body


@dataclass
class _Tries:
    """One pair's retries so far, and whether it holds a limiter slot."""

    held: bool
    attempts: int = 0
    n429: int = 0
    failed_ms: float = 0.0


@dataclass
class CollectResult:
    """What one run did (also printed as the summary)."""

    output: Path
    written: int = 0
    failed: int = 0
    verify_failures: int = 0
    already_done: int = 0
    given_up: int = 0
    todo: int = 0
    wall_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    rate_limited: int = 0
    pauses: int = 0
    """Pauses of every request the server asked for (a used-up quota, a 503 with Retry-After);
    answers that ask while one runs extend it."""
    retries: int = 0
    min_parallel: int = 0
    final_parallel: int = 0
    cost: float | None = None
    bad_lines: int = 0
    interrupted: bool = False
    aggregates: dict[str, Any] = field(default_factory=dict)
    estimate: dict[str, Any] | None = None
    gen_ms_total: float = 0.0
    gen_ms_count: int = 0
    verify_ms_total: float = 0.0
    verify_ms_count: int = 0
    """Sums and counts, not lists: a million rollouts must not keep a million numbers."""

    @property
    def gen_ms_mean(self) -> float | None:
        return self.gen_ms_total / self.gen_ms_count if self.gen_ms_count else None

    @property
    def verify_ms_mean(self) -> float | None:
        return self.verify_ms_total / self.verify_ms_count if self.verify_ms_count else None

    @property
    def samples_per_s(self) -> float:
        return self.written / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return (self.input_tokens + self.output_tokens) / self.wall_s if self.wall_s > 0 else 0.0

    def summary(self) -> str:
        cost = f" | cost {self.cost:.4f}" if self.cost is not None else ""
        return (
            f"collected {self.written} rollouts in {self.wall_s:.1f} s: {self.samples_per_s:.2f} samples/s, "
            f"{self.tokens_per_s:.0f} tokens/s ({self.output_tokens} output tokens) | failed {self.failed} "
            f"(in {failures_path(self.output).name}, retried next run) | verifier failures {self.verify_failures} "
            f"| 429s {self.rate_limited}, server pauses {self.pauses}, retries {self.retries}, "
            f"parallelism min {self.min_parallel} "
            f"end {self.final_parallel}{cost} | skipped: {self.already_done} already done, {self.given_up} given up, "
            f"{self.bad_lines} bad input lines"
            + (f" (in {rejects_path(self.output).name})" if self.bad_lines else "")
        )


class Collector:
    def __init__(self, cfg: CollectConfig, diagnose_pass: int | None = None):
        self.cfg = cfg
        self.diagnose_pass = diagnose_pass
        """Which pass of ``collect-rollouts diagnose`` this run is (1, 2; None: a collection), said on
        its run.start line: the analyzer lists no pass after the first as a restart."""
        self.env = load_env(cfg.env, cfg.env_options) if cfg.env else None
        self.verify = self.env is not None and cfg.verify.enabled
        self.prices = PriceTable(cfg.prices)
        self.rng = random.Random()
        self.result = CollectResult(cfg.output_jsonl_fpath)
        self.limiter = AdaptiveLimiter(
            cfg.num_samples_in_parallel, cfg.retry.min_parallel, tolerance=cfg.retry.rate_limit_tolerance
        )
        self.reward_sum = 0.0
        self.reward_n = 0
        self.price = None

    # ------------------------------------------------------------------ planning

    def _select(self) -> TaskSelection:
        """Scan the task file; list its first bad lines (all of them go to ``<stem>_rejects.jsonl``)
        and stop when there are more than ``--max_bad_lines``, before anything is sent."""
        cfg = self.cfg
        rejects = rejects_path(cfg.output_jsonl_fpath)
        try:
            sel = scan_tasks(
                cfg.input_jsonl_fpath, self.env, cfg.limit, cfg.shard_index, cfg.strict, rejects=rejects
            )
        except OSError as e:  # reading the input raises InputError: this is writing the rejects file
            raise OutputWriteError(rejects, e) from None
        for issue in sel.issues[:MAX_LISTED_ISSUES]:
            logger.warning(f"{cfg.input_jsonl_fpath}:{issue.line}: {issue.problem} (skipped)")
        n = len(sel.issues)
        if n > MAX_LISTED_ISSUES:
            logger.warning(
                f"... and {n - MAX_LISTED_ISSUES} more; all {n} rejected lines with their reasons are in {sel.rejects}"
            )
        elif n:
            logger.warning(f"the {n} rejected lines with their reasons are in {sel.rejects}")
        self.result.bad_lines = n
        check_bad_lines(sel, cfg.max_bad_lines)
        return sel

    def _check_same_tasks(self, first: dict[str, Any] | None) -> None:
        """The output's first record was collected on the task the input holds at its index: resuming
        an output with another task file would mix two data sets under one set of indices."""
        if first is None:
            return
        ti, cfg = first["task_index"], self.cfg
        row = row_at(cfg.input_jsonl_fpath, ti)
        if json.dumps(row, sort_keys=True) != json.dumps(first.get("task"), sort_keys=True):
            line = "past its end" if row is None else "another task"
            raise CollectError(
                f"{cfg.output_jsonl_fpath} holds records of another task file: its first record is of task_index "
                f"{ti}, and line {ti + 1} of {cfg.input_jsonl_fpath} is {line}; resume with the task file it was "
                "collected from, or write to another --output"
            )

    def _check_same_params(self, first: dict[str, Any] | None, params: dict[str, Any]) -> None:
        if first is None or self.cfg.allow_param_change:
            return
        before = {k: v for k, v in (first.get("params") or {}).items() if k != "seed"}
        now = {k: v for k, v in params.items() if k != "seed"}
        if before != now:
            diff = {
                k: (before.get(k), now.get(k))
                for k in sorted(set(before) | set(now))
                if before.get(k) != now.get(k)
            }
            raise CollectError(
                f"{self.cfg.output_jsonl_fpath} holds records collected with other parameters "
                f"({', '.join(f'{k}: {a!r} there, {b!r} now' for k, (a, b) in diff.items())}); resume with the same "
                f"parameters, write to another --output, or pass --allow_param_change"
            )

    # ------------------------------------------------------------------ one pair

    async def _one(
        self,
        backend: ChatBackend,
        scorer: Scorer | None,
        writer: AppendWriter,
        failures: AppendWriter,
        params: dict,
        task_index: int,
        repeat: int,
        row: dict,
        messages: list,
        admission,
    ) -> None:
        tid = new_trace_id()
        created = time.monotonic()
        params = task_params(params, row)
        body = request_body(params, messages, task_index, repeat)
        # the dispatcher admitted this pair with a slot already held: queue_ms is the time it then
        # spends between attempts (backoff, Retry-After pauses, re-admission under a lowered limit)
        tries = _Tries(held=True)
        try:
            comp, sent, gen_ms = await self._send(backend, body, tid, tries)
            queue_ms = (sent - created) * 1000 - tries.failed_ms
            record = self._record(
                task_index,
                repeat,
                row,
                comp,
                params,
                body["seed"] if "seed" in params else None,
                tries.attempts + tries.n429 + 1,
            )
            record["timings"] = {"queue_ms": queue_ms, "gen_ms": gen_ms}
            if scorer is not None and scorer.max_turns > 1:

                async def next_turn(conversation: list[dict]) -> tuple[Completion, float]:
                    turn_body = request_body(params, conversation, task_index, repeat)
                    answer, _, ms = await self._send(backend, turn_body, tid, tries)
                    return answer, ms

                episode = await play_episode(
                    row,
                    messages,
                    comp,
                    gen_ms,
                    scorer,
                    next_turn,
                    self.cfg.episode.timeout_s,
                    self.cfg.episode.tool_parser,
                )
                add_episode(record, episode)
                comp = episode.totals
                record["attempts"] = tries.attempts + tries.n429 + len(episode.turns)
            elif scorer is not None:
                apply_verdict(record, await scorer.score(row, comp.text))
            record["timings"]["total_ms"] = (time.monotonic() - created) * 1000
            writer.write(record)
            self._count(record, comp.input_tokens, comp.output_tokens)
            t = record["timings"]
            log_tagged(
                "collect",
                "rollout.done",
                tid,
                task=task_index,
                repeat=repeat,
                status=200,
                dur_ms=t["total_ms"],
                queue_ms=queue_ms,
                gen_ms=t["gen_ms"],
                verify_ms=t.get("verify_ms"),
                out_tokens=comp.output_tokens,
                attempts=record["attempts"],
                url=comp.url,
            )
        except RequestError as e:
            self.result.failed += 1
            failures.write(
                {
                    "task_index": task_index,
                    "repeat_index": repeat,
                    "error": str(e),
                    "kind": type(e).__name__,
                    "status": e.status,
                    "attempts": tries.attempts + tries.n429,
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
            )
            log_tagged(
                "collect",
                "rollout.failed",
                tid,
                task=task_index,
                repeat=repeat,
                status=e.status or "conn",
                dur_ms=(time.monotonic() - created) * 1000,
                kind=type(e).__name__,
                url=e.url,
            )
        finally:
            if tries.held:
                self.limiter.release()
            admission.release()

    async def _send(
        self, backend: ChatBackend, body: dict, tid: str, tries: _Tries
    ) -> tuple[Completion, float, float]:
        """One request, retried as ``retry`` says (429s: Retry-After, the limiter counts them;
        5xx and connection errors: backoff), holding a limiter slot while it is in flight;
        (the answer, when the last attempt was sent, its ms). Raises the last error."""
        retry = self.cfg.retry
        while True:
            if not tries.held:
                await self.limiter.acquire()
                tries.held = True
            # admitted before a pause began (by another request's 429, or another Ray worker's,
            # which arrives when this process next runs): it is not sent until the pause ends
            await self.limiter.wait_pause()
            sent = time.monotonic()
            try:
                comp: Completion = await backend.chat(body, tid)
                break
            except RateLimited as e:
                tries.failed_ms += (time.monotonic() - sent) * 1000
                tries.n429 += 1
                self.result.rate_limited += 1
                self._count_answer(rate_limited=True)
                wait = self._rate_limit_wait(e, tries.n429)
                log_tagged(
                    "collect",
                    "request.retry",
                    tid,
                    status=429,
                    wait_ms=wait * 1000,
                    attempt=tries.n429,
                    retry_after=e.retry_after is not None,
                    url=e.url,
                )
                if tries.n429 > retry.max_429_retries:
                    raise
                self.limiter.release()
                tries.held = False
                await asyncio.sleep(wait)
            except RequestError as e:
                tries.failed_ms += (time.monotonic() - sent) * 1000
                tries.attempts += 1
                if not e.retryable or tries.attempts > retry.max_retries:
                    raise
                self.limiter.release()
                tries.held = False
                self.result.retries += 1
                delay = retry.delay(tries.attempts, self.rng, e.retry_after)
                if e.server_wide:
                    self._pause(delay, e.status)
                log_tagged(
                    "collect",
                    "request.retry",
                    tid,
                    status=e.status or "conn",
                    wait_ms=delay * 1000,
                    attempt=tries.attempts,
                    url=e.url,
                )
                await asyncio.sleep(delay)
        gen_ms = (time.monotonic() - sent) * 1000
        self.limiter.release()
        tries.held = False
        self._count_answer(rate_limited=False)
        return comp, sent, gen_ms

    def _rate_limit_wait(self, e: RateLimited, n429: int) -> float:
        """How long a request answered 429 for the ``n429``-th time waits before it is sent again:
        the server's Retry-After plus up to 10% (never sooner, and refused requests do not all come
        back at once); without one, capped exponential backoff with jitter from
        ``retry.default_retry_after_s``. A server that says its whole quota is used up pauses
        every request for that long."""
        retry = self.cfg.retry
        if e.retry_after is not None:
            wait = e.retry_after * self.rng.uniform(1.0, 1.1)
        else:
            wait = backoff_delay(n429, retry.default_retry_after_s, retry.backoff_max_s, self.rng)
        if e.server_wide:
            self._pause(wait, 429)
        return wait

    def _pause(self, seconds: float, status: int | None) -> None:
        """The server asked every request to wait: hold new ones back (a pause starting is logged
        and counted; an answer asking while one runs extends it)."""
        if self.limiter.paused_until < time.monotonic():  # not already pausing: a new pause
            log_tagged("collect", "parallel.pause", None, wait_ms=seconds * 1000, status=status)
            self.result.pauses += 1
        self.limiter.pause(seconds)

    def _count_answer(self, rate_limited: bool) -> None:
        """Count an answer into the limiter's window; log when the window moved the limit."""
        change = self.limiter.on_answer(rate_limited)
        if change is not None:
            log_tagged(
                "collect",
                "parallel.change",
                None,
                before=change.before,
                after=change.after,
                reason=429 if change.after < change.before else "recover",
                answers=change.answers,
                refused=change.refused,
            )

    def _record(
        self,
        task_index: int,
        repeat: int,
        row: dict,
        comp: Completion,
        params: dict,
        seed: int | None,
        attempts: int,
    ) -> dict:
        response: dict[str, Any] = {"text": comp.text, "finish_reason": comp.finish_reason}
        if comp.token_ids is not None:
            response["token_ids"] = comp.token_ids
        if comp.prompt_token_ids is not None:
            response["prompt_token_ids"] = comp.prompt_token_ids
        if comp.tool_calls:
            response["tool_calls"] = comp.tool_calls
        sample_params = (
            dict(params) if seed is None else {**params, "seed": seed}
        )  # the seed this sample was sent
        return {
            "task_index": task_index,
            "repeat_index": repeat,
            "task": row,
            "response": response,
            "usage": {
                "input_tokens": comp.input_tokens,
                "output_tokens": comp.output_tokens,
                "total_tokens": comp.input_tokens + comp.output_tokens,
            },
            "reward": None,
            "verified": False,
            "model": comp.model or params["model"],
            "params": sample_params,
            "server": comp.url,
            "attempts": attempts,
        }

    def _count(self, record: dict, input_tokens: int, output_tokens: int) -> None:
        """Count a written record: tokens, timings, verifier failures, reward and cost."""
        r = self.result
        r.written += 1
        r.input_tokens += input_tokens
        r.output_tokens += output_tokens
        timings = record.get("timings") or {}
        r.gen_ms_total += float(timings.get("gen_ms") or 0.0)
        r.gen_ms_count += 1
        if "verify_ms" in timings:
            r.verify_ms_total += float(timings["verify_ms"] or 0.0)
            r.verify_ms_count += 1
        if record.get("verify_error"):
            r.verify_failures += 1
        if isinstance(record.get("reward"), float):
            self.reward_sum += record["reward"]
            self.reward_n += 1
        if self.price is not None:
            r.cost = (r.cost or 0.0) + (PriceTable.cost(self.price, input_tokens, output_tokens) or 0.0)

    # ------------------------------------------------------------------ the run

    def _postfix(self) -> str:
        r = self.result
        parts = [
            f"reward={self.reward_sum / self.reward_n:.3f}" if self.reward_n else "reward=-",
            f"par={self.limiter.inflight}/{self.limiter.current}",
            f"429s={r.rate_limited}",
            f"fail={r.failed}",
        ]
        if r.cost is not None and r.written:
            parts.append(f"cost={r.cost:.4f}/~{r.cost / r.written * r.todo:.4f}")
        return " ".join(parts)

    async def _refresh(self, progress: Progress) -> None:
        while True:
            await asyncio.sleep(self.cfg.progress_interval_s)
            progress.refresh(
                self.result.already_done + self.result.written + self.result.failed, self._postfix()
            )

    async def run(self) -> CollectResult:
        with exclusive(self.cfg.output_jsonl_fpath):
            return await self._run()

    async def _run(self) -> CollectResult:
        cfg, r = self.cfg, self.result
        out = cfg.output_jsonl_fpath
        # the output is checked before the input's scan rewrites <out>_rejects.jsonl: an output that
        # is refused (not ours, or of another task file) is left with every file of its run as it was
        state = scan_output(out, repair=False)
        self._check_same_tasks(state.first)
        sel = self._select()
        repair_output(out, state)
        if state.duplicates:
            logger.warning(f"{out}: {state.duplicates} duplicate records (merge dedups them)")
        gave_up = read_failures(failures_path(out))
        todo = Pairs(cfg.num_repeats)
        for ti in sel.selected:
            for rep in range(cfg.num_repeats):
                key: Key = (ti, rep)
                if key in state.done:
                    r.already_done += 1
                elif gave_up[key] >= cfg.retry.max_attempts:
                    r.given_up += 1
                else:
                    todo.add(ti, rep)
        r.todo = todo.count
        if r.given_up:
            logger.warning(
                f"{r.given_up} pairs failed in {cfg.retry.max_attempts} runs and are skipped "
                f"(see {failures_path(out).name}; raise --retry.max_attempts to try again)"
            )
        if state.records:
            logger.info(
                f"resuming {out}: {r.already_done} of {len(sel.selected) * cfg.num_repeats} samples already "
                f"there, {r.todo} to go"
            )
        if self.env is None:
            logger.warning(
                "no --env: responses are collected unscored (score them later with collect-rollouts verify)"
            )
        started = time.monotonic()
        if r.todo:
            # where this run starts: run again, the collector appends to its log, and the analyzer
            # measures each run's samples in flight over its own time; a diagnose pass says so
            log_tagged(
                "collect",
                "run.start",
                None,
                todo=r.todo,
                done=r.already_done,
                resume=bool(state.records),
                **self._mode(),
            )
            await self._collect(sel, todo, state.first)
        r.wall_s = time.monotonic() - started
        r.min_parallel, r.final_parallel = self.limiter.min_seen, self.limiter.current
        r.aggregates = write_aggregates(out, cfg.pass_threshold)
        if cfg.estimate:
            r.estimate = self._estimate(sel)
        return r

    def _mode(self) -> dict[str, object]:
        """What this run is, for its run.start line: ``mode=collect``, or ``mode=diagnose pass=N``."""
        if self.diagnose_pass is None:
            return {"mode": "collect"}
        return {"mode": "diagnose", "pass": self.diagnose_pass}

    async def _collect(self, sel: TaskSelection, todo: Pairs, first: dict | None) -> None:
        cfg, r = self.cfg, self.result
        api_key = resolve_api_key(cfg)
        auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with (
            chat_backend(cfg, api_key) as backend,
            ServerMetricsScraper(backend.base_urls, cfg.server_metrics, auth),  # [server] metrics lines
        ):
            model = cfg.responses_create_params.model or await backend.first_model()
            params = request_params(cfg, model)
            self._check_same_params(first, params)
            self.price = self.prices.lookup(model)
            logger.info(
                f"collecting {r.todo} samples ({len(todo)} tasks x up to {cfg.num_repeats}) with {model} "
                f"from {', '.join(backend.base_urls)} at parallelism {cfg.num_samples_in_parallel}"
                + ("" if self.verify else " (unscored)")
            )
            scorer = (
                Scorer(cfg.env, cfg.env_options, cfg.verify, cfg.episode.max_turns)  # type: ignore[arg-type]
                if self.verify
                else None
            )
            admission = asyncio.Semaphore(2 * cfg.num_samples_in_parallel + 2 * cfg.verify.workers)
            progress = Progress(cfg.progress, r.todo + r.already_done, r.already_done)
            refresher = asyncio.create_task(self._refresh(progress))
            pending: set[asyncio.Task] = set()
            fatal: list[BaseException] = []

            def finished(task: asyncio.Task) -> None:
                # An exception escaping a pair (a write error: a full disk) stops the run; reading it
                # here marks it retrieved, so no task's error is reported again at exit.
                pending.discard(task)
                if not task.cancelled() and task.exception() is not None:
                    fatal.append(task.exception())

            with (
                AppendWriter(cfg.output_jsonl_fpath) as writer,
                AppendWriter(failures_path(cfg.output_jsonl_fpath), lazy=True) as failures,
            ):
                try:
                    for ti, row, messages in iter_tasks(cfg.input_jsonl_fpath, todo, self.env):
                        for rep in todo.repeats_of(ti):
                            await admission.acquire()
                            if fatal:
                                break
                            await self.limiter.acquire()
                            if fatal:
                                self.limiter.release()
                                admission.release()
                                break
                            task = asyncio.create_task(
                                self._one(
                                    backend,
                                    scorer,
                                    writer,
                                    failures,
                                    params,
                                    ti,
                                    rep,
                                    row,
                                    messages,
                                    admission,
                                )
                            )
                            pending.add(task)
                            task.add_done_callback(finished)
                        if fatal:
                            break
                    while pending and not fatal:
                        await asyncio.wait(list(pending), return_when=asyncio.FIRST_COMPLETED)
                    if fatal:
                        await self._cancel(pending)
                        raise fatal[0]
                except asyncio.CancelledError:
                    r.interrupted = True
                    await self._cancel(pending)
                    raise
                finally:
                    refresher.cancel()
                    progress.refresh(r.already_done + r.written + r.failed, self._postfix())
                    progress.close()
                    if scorer is not None:
                        scorer.close()

    @staticmethod
    async def _cancel(pending: set[asyncio.Task]) -> None:
        """Cancel the pairs still in flight and wait for them to end."""
        for task in list(pending):
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _estimate(self, sel: TaskSelection) -> dict[str, Any]:
        """Extrapolate this run to every task of the file (this shard), at this run's speed."""
        cfg, r, agg = self.cfg, self.result, self.result.aggregates
        full = sel.shard_total * cfg.num_repeats
        in_tok, out_tok = agg.get("usage.input_tokens", 0.0), agg.get("usage.output_tokens", 0.0)
        price = self.price or self.prices.lookup(cfg.responses_create_params.model)
        per_sample = PriceTable.cost(price, in_tok, out_tok)
        remaining = max(0, full - agg.get("num_records", 0))
        est = {
            "samples_in_file": full,
            "samples_done": agg.get("num_records", 0),
            "samples_remaining": remaining,
            "mean_input_tokens": in_tok,
            "mean_output_tokens": out_tok,
            "cost_per_sample": per_sample,
            "projected_total_cost": None if per_sample is None else per_sample * full,
            "projected_remaining_cost": None if per_sample is None else per_sample * remaining,
            "samples_per_s": r.samples_per_s,
            "parallelism": cfg.num_samples_in_parallel,
            "projected_remaining_s": remaining / r.samples_per_s if r.samples_per_s else None,
        }
        write_json(sibling(cfg.output_jsonl_fpath, "_estimate.json"), est)
        return est


def write_aggregates(output: Path, pass_threshold: float) -> dict[str, Any]:
    """Aggregate every record of ``output`` into ``<stem>_aggregate_metrics.json``."""
    records = (lambda: (r for _, r in iter_records(output))) if output.exists() else (lambda: iter(()))
    result = aggregate_file(records, pass_threshold)
    write_json(aggregates_path(output), result)
    return result


def write_json(path: Path, obj: Any) -> None:
    """Atomically write a JSON sibling of the output; a failure is an :class:`OutputWriteError`."""
    try:
        atomic_write_json(path, obj)
    except OSError as e:
        raise OutputWriteError(path, e) from None


async def collect(cfg: CollectConfig, diagnose_pass: int | None = None) -> CollectResult:
    """Collect ``cfg``'s samples (``diagnose_pass``: as that pass of ``collect-rollouts diagnose``)."""
    return await Collector(cfg, diagnose_pass).run()
