"""The orchestrator loop: rollouts in flight continuously, the async barrier, batches for the trainer.

A producer task keeps up to ``max_inflight`` groups (one task, ``rollouts_per_example``
completions, one request with ``n``) in flight across the servers, but never starts more than
the current policy can legally serve (:func:`barrier.groups_wanted`). Each group carries the
policy step that actually produced it, as the server reports it (the ``x-policy-step`` answer
header of :mod:`prime_rl.inference.admin`), not the step the orchestrator believes the server
holds: a server that recovers from a failure may still serve older weights. The step loop waits
at the barrier for ``weights/step_{s - async_level}``, loads it on every server through the
admin client, collects the step's groups, and publishes one rollout file per trainer rank.

A group is regenerated (its task handed out again, up to ``MAX_REDO`` times, then dropped) when
its staleness ``s - policy_step`` falls outside ``0..async_level`` (``stale_dropped``), when a
completion was aborted by a pause or a weight swap (finish_reason ``abort``, ``aborted``), or when
the server cannot say which policy served it (``policy_unknown``). Each such drop is counted in
metrics.jsonl and logged as ``[gen] group.drop``.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from loguru import logger

from prime_rl import failpoints
from prime_rl.clients.admin import AdminClient, WeightUpdateError
from prime_rl.clients.chat import chat_url, completions_url
from prime_rl.clients.errors import RateLimited, Rejected, RequestError, TransportError
from prime_rl.clients.fleet import FleetBalancer
from prime_rl.clients.pool import HealthProbe, InferencePool, JsonReply
from prime_rl.clients.server_metrics import ServerMetricsScraper
from prime_rl.envs.base import Task
from prime_rl.envs.registry import load_env
from prime_rl.envs.verify import VerifierPool
from prime_rl.logging import log_tagged
from prime_rl.monitor import record_metrics
from prime_rl.orchestrator.advantages import group_advantages, is_degenerate
from prime_rl.orchestrator.barrier import groups_wanted, is_usable, update_target
from prime_rl.orchestrator.batch import Group, Rollout, write_step_batches
from prime_rl.orchestrator.config import OrchestratorConfig
from prime_rl.orchestrator.episode import (
    OUTCOMES,
    ChatDelta,
    Episode,
    EpisodeError,
    EpisodeLimits,
    SampledTurn,
    play,
)
from prime_rl.orchestrator.ledger import TaskLedger
from prime_rl.paths import RunPaths, atomic_write_json, is_stable, mark_stable, resolve_resume_step
from prime_rl.tracing import one_line
from prime_rl.transport.weights import POLICY_HEADER

COMPONENT = "orchestrator"
MAX_REDO = 3
"""Times a task is regenerated after stale, aborted or unattributable groups before it is dropped."""


class OrchestratorError(RuntimeError):
    """The run cannot go on (servers unreachable, requests failing past their retries, no weights)."""


class Orchestrator:
    def __init__(self, cfg: OrchestratorConfig):
        self.cfg = cfg
        self.paths = RunPaths(cfg.output_dir)
        self.env = load_env(cfg.env.name, cfg.env.options)
        self.pool = InferencePool(cfg.client)
        self.admin = AdminClient(cfg.client, pool=self.pool)
        auth = {k: v for k, v in self.pool.headers.items() if k == "Authorization"}  # the API key, if any
        self.server_metrics = ServerMetricsScraper(self.pool.base_urls, cfg.server_metrics, auth)
        if cfg.fleet.adaptive and self.server_metrics.enabled:
            self.pool.balancer = FleetBalancer(
                self.pool.base_urls,
                cfg.fleet,
                cfg.max_inflight,
                self.server_metrics.latest,
                self.pool.inflight,
            )
        self.verifier = VerifierPool(cfg.env.name, cfg.env.options, cfg.verify.workers, cfg.verify.timeout_s)
        self.max_turns = cfg.episode.max_turns or self.env.max_turns
        self._tokenizer = None
        self.retry = cfg.request_retry
        self._rng = random.Random()
        self.step = 0
        self.ckpt_step = 0
        self.ready: list[Group] = []
        self.taken = 0
        """Groups already collected into the current step's batch (still count against the policy)."""
        self.inflight: set[asyncio.Task] = set()
        self.down: set[str] = set()
        self.fatal: BaseException | None = None
        self._wake_producer = asyncio.Event()
        self._group_ready = asyncio.Event()
        self._tasks = enumerate(self.env.tasks(cfg.env.seed))
        self._redo: deque[tuple[int, Task]] = deque()
        self._redo_count: dict[int, int] = {}
        self._no_policy_header: set[str] = set()
        self.ledger = TaskLedger()
        self._requests = 0
        self._last_wait_ms = 0.0
        self._last_step_end = time.monotonic()
        self.counters = {
            "retries": 0,
            "stale_dropped": 0,
            "aborted": 0,
            "policy_unknown": 0,
            "policy_mismatch": 0,
            "dropped_tasks": 0,
            "zero_filtered": 0,
            "too_long": 0,
            "request_errors": 0,
        }

    # ------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        producer = health = None
        try:
            await self._load_tokenizer()
            await self.wait_for_servers()
            await self.admin.start()  # connections for weight updates, open before the streams start
            self.server_metrics.start()  # [server] metrics lines every server_metrics.interval_s
            start = self._resume() if self.cfg.resume.enabled else 0
            # where this run starts: the analyzer splits a log appended over a crash and a resume here,
            # and judges this run's staleness by its own async_level (a resume may change it); logged
            # before the resume's weight load, so that a load that hangs is this run's, not the last's
            log_tagged(
                "gen",
                "run.start",
                step=start,
                resume=self.cfg.resume.enabled,
                async_level=self.cfg.async_level,
            )
            if self.cfg.resume.enabled:
                logger.info(f"resuming at step {start}: loading weights/step_{start} on every server")
                await self._load_weights(start)
            producer = asyncio.create_task(self._produce())
            health = asyncio.create_task(self._health_loop())
            for step in range(start, self.cfg.max_steps):
                await self._run_step(step)
        finally:
            for t in [producer, health, *self.inflight]:
                if t is not None:
                    t.cancel()
            await asyncio.gather(
                *[t for t in [producer, health, *self.inflight] if t is not None], return_exceptions=True
            )
            self.verifier.close()
            await self.server_metrics.aclose()
            await self.admin.aclose()
            await self.pool.aclose()

    async def wait_for_servers(self) -> None:
        """Wait for every server's /health, with a visible countdown; then a clear error."""
        deadline = time.monotonic() + self.cfg.startup_timeout_s
        pending = list(self.pool.base_urls)
        next_note = 0.0
        async with HealthProbe() as probe:
            while pending:
                for url in list(pending):
                    if await probe.ok(url):
                        pending.remove(url)
                        logger.info(f"inference server {url} is up")
                if not pending:
                    return
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OrchestratorError(
                        f"inference server(s) {', '.join(pending)} not reachable after {self.cfg.startup_timeout_s:.0f}s "
                        "(started? right --client.base_urls?)"
                    )
                if time.monotonic() >= next_note:
                    logger.info(f"waiting for inference server(s) {', '.join(pending)}: {left:.0f}s left")
                    next_note = time.monotonic() + 10.0
                await asyncio.sleep(1.0)

    # ------------------------------------------------------------------ one step

    async def _run_step(self, step: int) -> None:
        self.step = step
        self.taken = 0
        self._wake_producer.set()
        wait_ms = await self._barrier(step)
        t0 = time.monotonic()
        log_tagged(
            "gen", "batch.start", step=step, inflight=len(self.inflight), target_batch=self.cfg.batch_size
        )
        groups = await self._collect(step)
        t1 = time.monotonic()
        gen_ms = (t1 - t0) * 1000.0
        # the batch's end spent on scoring alone: after the last of its turns was sampled
        tail_ms = (t1 - max([t0, *(g.sampled_at for g in groups)])) * 1000.0
        rollouts = [r for g in groups for r in g.rollouts]
        log_tagged(
            "gen",
            "batch.done",
            step=step,
            completions=len(rollouts),
            dur_ms=gen_ms,
            inflight=len(self.inflight),
        )
        step_s = time.monotonic() - self._last_step_end
        self._last_step_end = time.monotonic()
        verify_ms = sum(r.verify_ms for r in rollouts)
        failures = sum(r.error is not None for r in rollouts)
        log_tagged(
            "verify",
            "batch.done",
            step=step,
            completions=len(rollouts),
            dur_ms=verify_ms,
            cpu_ms=verify_ms,
            tail_ms=tail_ms,
            workers=self.cfg.verify.workers,
            failures=failures,
        )
        oldest = min(g.policy_step for g in groups)
        truncated = sum(r.truncated for r in rollouts)
        trunc_pct = 100.0 * truncated / max(len(rollouts), 1)
        log_tagged(
            "rollout", None, trunc_pct=trunc_pct, current_step=step, ckpt_step=oldest, staleness=step - oldest
        )
        write_step_batches(
            self.paths.rollouts_dir(step),
            step,
            rollouts,
            self.cfg.trainer_world_size,
            self.cfg.sampling.temperature,
        )
        failpoints.hit("orchestrator.rollouts.written", step)
        for g in groups:
            self.ledger.mark(g.task_index)
        self._metrics(step, rollouts, trunc_pct, step - oldest, wait_ms, gen_ms, verify_ms, failures, step_s)
        if self.cfg.ckpt_interval and (step + 1) % self.cfg.ckpt_interval == 0:
            self._save_progress(step + 1)

    async def _barrier(self, step: int) -> float:
        target = update_target(step, self.ckpt_step, self.cfg.async_level)
        if target is None:
            return 0.0
        await self._load_weights(target)
        return self._last_wait_ms

    async def _load_weights(self, target: int) -> None:
        weight_dir = self.paths.weights_dir(target)
        log_tagged("ckpt", "wait.start", target_step=target)
        start = time.monotonic()
        while not is_stable(weight_dir):
            if self.fatal is not None:
                raise self.fatal
            if time.monotonic() - start > self.cfg.weights_timeout_s:
                raise OrchestratorError(
                    f"{weight_dir} not published after {self.cfg.weights_timeout_s:.0f}s (is the trainer running?)"
                )
            await asyncio.sleep(0.05)
        self._last_wait_ms = (time.monotonic() - start) * 1000.0
        log_tagged("ckpt", "wait.done", target_step=target, wait_ms=self._last_wait_ms)
        await self._update_servers(
            str(weight_dir.resolve()), [u for u in self.pool.base_urls if u not in self.down]
        )
        self.ckpt_step = target
        self._wake_producer.set()

    async def _update_servers(self, weight_dir: str, urls: list[str]) -> None:
        try:
            await self.admin.update_weights(weight_dir, urls=urls)
        except WeightUpdateError as e:
            failed = {err.url for err in e.errors}
            if any(err.status is not None and 400 <= err.status < 500 for err in e.errors):
                raise OrchestratorError(f"weight update refused: {e}") from e
            self.down |= failed
            logger.warning(
                f"servers {sorted(failed)} failed the weight update and are out until they recover: {one_line(str(e))}"
            )
            if not set(self.pool.base_urls) - self.down:
                raise OrchestratorError(f"no inference server took the weight update: {e}") from e

    async def _collect(self, step: int) -> list[Group]:
        groups: list[Group] = []
        while len(groups) < self.cfg.groups_per_step:
            if self.fatal is not None:
                raise self.fatal
            if not self.ready:
                self._group_ready.clear()
                await self._group_ready.wait()
                continue
            group = self.ready.pop(0)
            self._wake_producer.set()
            if not is_usable(group.policy_step, step, self.cfg.async_level):
                self.counters["stale_dropped"] += 1
                self._regenerate(group.task_index, group.task, "stale", group.policy_step)
                continue
            if self.cfg.advantage.filter_zero and is_degenerate([r.advantage for r in group.rollouts]):
                self.counters["zero_filtered"] += 1
                self.ledger.mark(group.task_index)
                continue
            groups.append(group)
            self.taken += 1
        return groups

    # ------------------------------------------------------------------ producing groups

    async def _produce(self) -> None:
        try:
            while True:
                have = len(self.inflight) + len(self.ready) + self.taken
                want = groups_wanted(
                    self.step, self.ckpt_step, self.cfg.async_level, self.cfg.groups_per_step, have
                )
                for _ in range(min(want, self.cfg.max_inflight - len(self.inflight))):
                    index, task = self._next_task()
                    t = asyncio.create_task(self._generate(index, task, self.ckpt_step))
                    self.inflight.add(t)
                    t.add_done_callback(self._group_done)
                self._wake_producer.clear()
                await self._wake_producer.wait()
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # pragma: no cover - surfaced through self.fatal
            self.fatal = e
            self._group_ready.set()

    def _next_task(self) -> tuple[int, Task]:
        if self._redo:
            return self._redo.popleft()
        for index, task in self._tasks:
            if self.ledger.skip(index):
                continue
            return index, task
        raise OrchestratorError(f"environment {self.cfg.env.name!r} ran out of tasks")

    def _group_done(self, t: asyncio.Task) -> None:
        self.inflight.discard(t)
        if t.cancelled():
            return
        exc = t.exception()
        if exc is not None and self.fatal is None:
            self.fatal = exc
        self._group_ready.set()
        self._wake_producer.set()

    async def _generate(self, index: int, task: Task, ckpt_step: int) -> None:
        cfg = self.cfg
        body = self._sampling_body(cfg.sampling.max_tokens)
        body |= {"messages": task["prompt"], "n": cfg.rollouts_per_example, "logprobs": True}
        tools = self.env.tool_specs(task)
        if tools:  # rendered into the prompt; the calls are read from the sampled text
            body["tools"], body["tool_choice"] = tools, "none"
        start = time.monotonic()
        answer = await self._request(body, chat_url)
        gen_ms = (time.monotonic() - start) * 1000.0
        if answer is None:  # the server refused this task (e.g. prompt too long): skip it
            self.ledger.mark(index)
            return
        url, reply = answer
        data = reply.data
        policy_step = self._served_policy(url, reply, ckpt_step)
        if policy_step is None:
            self.counters["policy_unknown"] += 1
            self._regenerate(index, task, "policy_unknown")
            return
        if policy_step != ckpt_step:
            self.counters["policy_mismatch"] += 1
        aborted = sum(c.get("finish_reason") == "abort" for c in data["choices"])
        if aborted:  # cut off by a pause or a weight swap: not a finished answer, never trained
            self.counters["aborted"] += aborted
            self._regenerate(index, task, "abort", policy_step)
            return
        prompt_ids = list(data["prompt_token_ids"])
        episodes = []
        for choice in data["choices"]:
            episode = Episode(prompt_ids, [dict(m) for m in task["prompt"]])
            episode.add_turn(self._sampled(choice, policy_step), gen_ms)
            episodes.append(episode)
        kept = [e for e in episodes if e.num_tokens <= cfg.seq_len]
        self.counters["too_long"] += len(episodes) - len(kept)
        limits = EpisodeLimits(
            self.max_turns,
            cfg.seq_len,
            cfg.sampling.max_tokens,
            cfg.episode.timeout_s,
            cfg.episode.tool_parser,
        )
        delta = None if self.max_turns == 1 else self._chat_delta(task)
        turn_log = None if self.max_turns == 1 else {"step": self.step, "task": index}
        await asyncio.gather(
            *(play(task, e, limits, self.verifier.step, self._sample_turn, delta, turn_log) for e in kept)
        )
        aborted = sum(e.outcome == "abort" for e in kept)
        if aborted:  # a later turn was cut off by a weight swap: regenerate the whole group
            self.counters["aborted"] += aborted
            self._regenerate(index, task, "abort", min(s for e in kept for s in e.policy_steps))
            return
        rollouts = [self._rollout(e, index) for e in kept]
        for r in rollouts:
            if r.truncated and cfg.truncated_reward is not None:
                r.reward = cfg.truncated_reward
        for r, a in zip(
            rollouts, group_advantages([r.reward for r in rollouts], cfg.advantage.std_normalize), strict=True
        ):
            r.advantage = a
        if rollouts:
            oldest = min(r.policy_step for r in rollouts)
            sampled_at = max(e.sampled_at for e in kept)
            self.ready.append(
                Group(index, str(task.get("id", index)), oldest, rollouts, gen_ms, task, sampled_at)
            )

    def _sampling_body(self, max_tokens: int) -> dict[str, Any]:
        """The fields every generation request carries (each request gets its own seed)."""
        sampling = self.cfg.sampling
        body: dict[str, Any] = {
            "model": self.cfg.model,
            "max_tokens": max_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "return_token_ids": True,
            "skip_special_tokens": False,
            **sampling.extra,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed + self._requests
        self._requests += 1
        return body

    def _sampled(self, choice: dict[str, Any], policy_step: int) -> SampledTurn:
        """One choice of a chat or completions answer as a :class:`SampledTurn`."""
        ids = list(choice["token_ids"])
        logprobs = choice.get("logprobs") or {}
        if "content" in logprobs:  # chat: [{token, logprob}]
            lps = [float(x["logprob"]) for x in logprobs.get("content") or []]
        else:  # completions: token_logprobs
            lps = [float(x) if x is not None else -1e4 for x in logprobs.get("token_logprobs") or []]
        if len(lps) != len(ids):
            raise OrchestratorError(f"server returned {len(ids)} token ids but {len(lps)} logprobs")
        lps = [max(lp, -1e4) if math.isfinite(lp) else -1e4 for lp in lps]
        text = choice["message"].get("content") or "" if "message" in choice else choice.get("text") or ""
        return SampledTurn(ids, lps, text, choice.get("finish_reason"), policy_step)

    async def _sample_turn(self, prompt_ids: list[int], max_tokens: int) -> SampledTurn:
        """A later model turn of an episode, generated from its exact token sequence."""
        body = self._sampling_body(max_tokens) | {"prompt": prompt_ids, "logprobs": 1}
        assumed = self.ckpt_step
        answer = await self._request(body, completions_url)
        if answer is None:
            raise EpisodeError("the server refused a later turn of the episode (see the warning above)")
        url, reply = answer
        policy_step = self._served_policy(url, reply, assumed)
        choice = reply.data["choices"][0]
        if policy_step is None:  # the server cannot say which policy sampled it: redo the group
            self.counters["policy_unknown"] += 1
            return SampledTurn([], [], "", "abort", assumed)
        if policy_step != assumed:
            self.counters["policy_mismatch"] += 1
        return self._sampled(choice, policy_step)

    async def _load_tokenizer(self) -> None:
        """The tokenizer that renders the environment's messages between turns (multi-turn only)."""
        if self.max_turns == 1:
            return
        from transformers import AutoTokenizer

        name = self.cfg.episode.tokenizer or self.cfg.model
        try:
            self._tokenizer = await asyncio.to_thread(AutoTokenizer.from_pretrained, name)
        except (OSError, ValueError) as e:
            raise OrchestratorError(
                f"multi-turn episodes need the model's tokenizer: cannot load {name!r} ({e}); "
                "set --episode.tokenizer to an HF dir or hub name"
            ) from e

    def _chat_delta(self, task: Task) -> ChatDelta:
        return ChatDelta(self._tokenizer, self.env.tool_specs(task))

    def _rollout(self, e: Episode, index: int) -> Rollout:
        r = Rollout(
            e.prompt_ids,
            e.completion_ids,
            e.logprobs,
            e.messages[-1].get("content") or "",
            truncated=e.truncated,
            policy_step=min(e.policy_steps),
            completion_mask=None if all(e.mask) else e.mask,
            turns=e.turns,
            outcome=e.outcome,
            tool_ms=e.tool_ms,
        )
        r.reward, r.error, r.verify_ms = e.reward, e.error, e.env_ms
        if e.score is not None:
            r.metrics = dict(e.score.metrics)
        if self.max_turns > 1:
            log_tagged(
                "env",
                "episode.done",
                step=self.step,
                task=index,
                turns=e.turns,
                outcome=e.outcome,
                reward=r.reward,
                env_ms=e.env_ms,
                tool_ms=e.tool_ms,
                gen_ms=sum(e.turn_gen_ms),
                tokens=e.num_tokens,
                tool_errors=len(e.tool_errors),
            )
        return r

    def _served_policy(self, url: str, reply: JsonReply, assumed: int) -> int | None:
        """The policy step the server says produced this answer; ``assumed`` if it does not say.

        None when it says it does not know (a swap whose rollback failed, a dir not named
        ``step_N``). A server without our admin routes sends no header: the orchestrator's own
        bookkeeping is then all there is, and a warning says so once per server.
        """
        raw = reply.headers.get(POLICY_HEADER)
        if raw is None:
            if url not in self._no_policy_header:
                self._no_policy_header.add(url)
                logger.warning(
                    f"{url} does not report the policy step it serves ({POLICY_HEADER} header): "
                    "staleness there is assumed from the orchestrator's bookkeeping, not checked"
                )
            return assumed
        try:
            return int(raw)
        except ValueError:
            return None

    def _regenerate(self, index: int, task: Task, reason: str, policy_step: int | None = None) -> None:
        """Hand a task out again (its group is not used); after ``MAX_REDO`` tries, drop it."""
        tries = self._redo_count[index] = self._redo_count.get(index, 0) + 1
        staleness = None if policy_step is None else self.step - policy_step
        give_up = tries > MAX_REDO
        log_tagged(
            "gen",
            "group.drop",
            step=self.step,
            task=index,
            reason=reason,
            policy_step=policy_step,
            staleness=staleness,
            redo=not give_up,
        )
        if give_up:
            self.counters["dropped_tasks"] += 1
            self._redo_count.pop(index, None)
            self.ledger.mark(index)
            logger.warning(f"task {index} dropped after {MAX_REDO} regenerations (last: {reason})")
        else:
            self._redo.append((index, task))
        self._wake_producer.set()

    async def _request(
        self, body: dict, url_of: Callable[[str], str] = chat_url
    ) -> tuple[str, JsonReply] | None:
        """POST one generation request (to ``url_of(server)``), retrying on other servers; None
        when the server refuses the task.

        429, 5xx, connection errors and timeouts are retried (``max_request_retries``; the wait
        is the server's Retry-After, else :func:`prime_rl.clients.backoff.backoff_delay`); any
        other 4xx refuses the task. A server that refuses connections is held down until the
        health loop brings it back.
        """
        last = "no attempt"
        for attempt in range(self.retry.max_retries + 1):
            url = await self._pick()
            start = time.monotonic()
            try:
                return url, await self.pool.post(url, url_of(url), body, timeout_s=self.cfg.request_timeout_s)
            except Rejected as e:
                self.counters["request_errors"] += 1
                logger.warning(
                    f"task refused by {url} (HTTP {e.status}: {one_line(e.body, 300)}); skipping it"
                )
                return None
            except RequestError as e:
                status = None if isinstance(e, TransportError) else e.status
                last = e.detail if isinstance(e, TransportError) else f"HTTP {e.status}: {e.body[:300]}"
                if isinstance(e, TransportError) and e.connect_failed:
                    self.down.add(url)
                retry_after = e.retry_after if isinstance(e, RateLimited) else None
            self.counters["retries"] += 1
            delay = self.retry.delay(attempt + 1, self._rng, retry_after)
            log_tagged(
                "gen",
                "request.retry",
                url=url,
                status=status or "error",
                attempt=attempt + 1,
                wait_ms=delay * 1000.0,
                elapsed_ms=(time.monotonic() - start) * 1000.0,
            )
            await asyncio.sleep(delay)
        raise OrchestratorError(
            f"rollout request failed after {self.retry.max_retries + 1} attempts; last error: {last}"
        )

    async def _pick(self) -> str:
        """The healthy server with the most headroom; waits while every one is at its in-flight
        limit (for a request to finish), and (bounded) while every server is down."""
        deadline = time.monotonic() + self.cfg.request_timeout_s
        while True:
            url = self.pool.pick(exclude=self.down)
            if url is not None:
                return url
            if self.pool.pick(exclude=self.down, limits=False) is not None:  # up, but all busy
                deadline = time.monotonic() + self.cfg.request_timeout_s
                await asyncio.sleep(0.02)
                continue
            if time.monotonic() > deadline:
                raise OrchestratorError(f"every inference server is down ({', '.join(sorted(self.down))})")
            await asyncio.sleep(0.5)

    async def _health_loop(self) -> None:
        """Bring recovered servers back: health check, then load the current weights, then serve."""
        async with HealthProbe() as probe:
            while True:
                await asyncio.sleep(2.0)
                for url in sorted(self.down):
                    if not await probe.ok(url):
                        continue
                    target = self.ckpt_step
                    try:
                        if target > 0:
                            await self.admin.update_weights(
                                str(self.paths.weights_dir(target).resolve()), urls=[url], background=True
                            )
                        else:
                            await self.admin.reload_weights(urls=[url], background=True)
                    except WeightUpdateError:
                        continue
                    if target != self.ckpt_step:  # the barrier moved on meanwhile: load that first
                        continue
                    self.down.discard(url)
                    self.pool.mark_up(url)
                    logger.info(f"inference server {url} is back (policy step {self.ckpt_step})")

    # ------------------------------------------------------------------ metrics, progress, resume

    def _metrics(
        self,
        step: int,
        rollouts: list[Rollout],
        trunc_pct: float,
        staleness: int,
        wait_ms: float,
        gen_ms: float,
        verify_ms: float,
        failures: int,
        step_s: float,
    ) -> None:
        rewards = [r.reward for r in rollouts]
        mean = sum(rewards) / len(rewards)
        std = math.sqrt(sum((x - mean) ** 2 for x in rewards) / len(rewards))
        completion_tokens = sum(len(r.completion_ids) for r in rollouts)
        extra: dict[str, float] = {}
        for key in sorted({k for r in rollouts for k in r.metrics}):
            vals = [r.metrics[key] for r in rollouts if key in r.metrics]
            extra[f"env/{key}"] = sum(vals) / len(vals)
        outcomes = {o: sum(r.outcome == o for r in rollouts) for o in OUTCOMES if o not in ("done", "abort")}
        extra.update({f"episode/{o}": float(n) for o, n in outcomes.items() if n})
        extra["turns_mean"] = sum(r.turns for r in rollouts) / len(rollouts)
        extra["tool_ms"] = sum(r.tool_ms for r in rollouts)
        secs = max(step_s, 1e-9)  # wall time of the whole step: batches produced ahead are not free
        row = {
            "process": "orchestrator",
            "step": step,
            "reward_mean": mean,
            "reward_std": std,
            "pass_rate": sum(x >= 1.0 for x in rewards) / len(rewards),
            "trunc_pct": trunc_pct,
            "staleness": staleness,
            "seq_len_mean": sum(r.num_tokens for r in rollouts) / len(rollouts),
            "completion_len_mean": completion_tokens / len(rollouts),
            "rollouts_per_s": len(rollouts) / secs,
            "tokens_per_s": completion_tokens / secs,
            "wait_weights_ms": wait_ms,
            "gen_ms": gen_ms,
            "verify_ms": verify_ms,
            "verify_failures": failures,
            "step_s": step_s,
            "ckpt_step": self.ckpt_step,
            **self.counters,
            **extra,
        }
        logger.info(
            f"step {step} | reward {mean:.3f} ± {std:.3f} | pass {row['pass_rate']:.2f} | trunc {trunc_pct:.1f}% | "
            f"staleness {staleness} | {row['rollouts_per_s']:.1f} rollouts/s | gen {gen_ms:.0f} ms | "
            f"weights wait {wait_ms:.0f} ms | verify failures {failures}"
        )
        record_metrics(self.cfg, row)  # metrics.jsonl, and W&B/TensorBoard when enabled

    def _save_progress(self, next_step: int) -> None:
        part = self.paths.checkpoint_dir(next_step) / COMPONENT
        if part.exists():
            shutil.rmtree(part)
        atomic_write_json(part / "progress.json", {"step": next_step, **self.ledger.snapshot()})
        mark_stable(part)
        log_tagged("ckpt", "save.done", step=next_step, component=COMPONENT)

    def _resume(self) -> int:
        """The step to resume at, with the task ledger as it was there (the caller loads its weights)."""
        root = self.paths.checkpoints_root
        step = resolve_resume_step(root, self.cfg.resume.step, COMPONENT)
        progress = json.loads((root / f"step_{step}" / COMPONENT / "progress.json").read_text())
        self.ledger = TaskLedger.restore(progress)
        self.step = step
        return step
