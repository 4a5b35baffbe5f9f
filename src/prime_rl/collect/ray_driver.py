"""``collect-rollouts --ray [ADDRESS]``: the same collection, its requests sent from every node of
a Ray cluster.

The driver (this process) is the single-process collector with its sending part replaced
(:class:`RayCollector` subclasses :class:`~prime_rl.collect.runner.Collector`): it takes the
output's lock, scans the task file and the output, skips what is done or given up, writes every
record and failure itself, shows the progress and writes the aggregates. Workers
(:class:`~prime_rl.collect.ray_worker.CollectWorker` actors, ``ray.workers_per_node`` on every node
that has ``ray.num_cpus`` CPUs, pinned there) run the per-pair code of the single-process
collector against the servers nearest them (``ray.node_base_urls``, else ``base_urls``) and
stream back batches of records, failures and log lines.

Exactly once: a pair is handed to one worker at a time and stays *outstanding* (with its row, to
hand out again) until its record or failure comes back; the driver writes it then, once, and
forgets the pair; a record for a pair that is not outstanding is dropped. When a worker's stream
fails (the actor was killed, its process or its node died) its outstanding pairs go to the other
workers; a pair lost with ``ray.max_pair_losses`` workers is recorded as a failure (kind
``WorkerLost``). Memory stays flat: each worker holds at most its window of pairs, the task file
is read as pairs are handed out, records are written as they arrive. A killed driver loses
nothing written (its workers die with its job); the same command resumes from the output.

Rate limits: each worker has the single-process :class:`~prime_rl.collect.limiter.AdaptiveLimiter`
with its share of ``num_samples_in_parallel`` (the workers that use the same base URLs split it;
shares move when workers come or go). The limiter's cut is proportional to the share of 429s in a
window, so workers that see the same servers cut by the same factor and their sum behaves as one
limiter, without a request-by-request round trip to a central one. A server pause (a used-up quota,
a 503 with Retry-After) seen by one worker is sent to the others of its group through the driver.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from loguru import logger

from prime_rl.collect.config import CollectConfig
from prime_rl.collect.progress import Progress
from prime_rl.collect.ray_worker import CollectWorker
from prime_rl.collect.runner import CollectError, Collector, CollectResult, request_params, resolve_api_key
from prime_rl.collect.store import AppendWriter, Key, OutputWriteError, failures_path, record_key
from prime_rl.collect.tasks import TaskSelection, iter_tasks

FIRST_WORKER_TRIES = 3
"""Nodes tried for the first worker (it finds the model) before the run gives up."""


class ClusterError(RuntimeError):
    """The Ray cluster cannot be reached, has no worker left, or a worker hit a bug (exit 1); every
    record written stays."""


@dataclass(eq=False)
class _Task:
    """A task being handed out: its row and prompt, and how often each repeat was lost with a worker."""

    index: int
    row: dict[str, Any]
    messages: list[dict[str, Any]]
    losses: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Node:
    id: str
    ip: str
    hostname: str


@dataclass(eq=False)
class _Worker:
    name: str
    handle: Any
    node: _Node
    urls: tuple[str, ...]
    pid: int | None = None
    share: int = 1
    minimum: int = 1
    window: int = 16
    scrapes: tuple[str, ...] = ()
    orders: int = 0
    """Orders (share, scrape) sent so far: each carries its number, the worker applies the latest."""
    outstanding: int = 0
    stats: dict[str, Any] = field(default_factory=dict)
    alive: bool = True
    consumer: asyncio.Task | None = None

    def order(self) -> int:
        """The next order's sequence number (Ray may run a worker's calls out of order)."""
        self.orders += 1
        return self.orders

    def where(self) -> str:
        return f"worker {self.name} (pid {self.pid}, node {self.node.ip} {self.node.id[:8]})"


def import_ray():
    try:
        import ray
    except ImportError:
        raise CollectError(
            "--ray needs Ray on this machine and every node: pip install 'prime-rl[ray]'"
        ) from None
    return ray


def _check_reachable(address: str, timeout_s: float = 10.0) -> None:
    """Refuse a ``HOST:PORT`` nothing answers on at once (ray.init would retry for minutes)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return  # auto, local, unset: ray.init finds (or starts) the cluster
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ClusterError(
            f"cannot connect to the Ray cluster at {address}: {e.strerror or e} (is `ray start --head` "
            "running there? the address is the head's HOST:PORT, by default port 6379)"
        ) from None


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(e).__name__}: {first[:300]}" if first else type(e).__name__


class RayCollector(Collector):
    def __init__(self, cfg: CollectConfig):
        super().__init__(cfg)
        self.ray: Any = None
        self.remote: Any = None
        self.api_key: str | None = None
        self.params: dict[str, Any] | None = None
        self.workers: dict[str, _Worker] = {}
        self.outstanding: dict[Key, tuple[_Worker, _Task]] = {}
        self.requeued: deque[tuple[_Task, int]] = deque()
        self.exhausted = False
        self.node_starts: Counter[str] = Counter()
        self.starting: Counter[str] = Counter()
        self.start_tasks: set[asyncio.Task] = set()
        self.handles: list[Any] = []
        self.gone_stats: list[dict[str, Any]] = []
        self.dropped = 0
        self.lost = 0
        self.fatal: BaseException | None = None
        self.check_now = False
        self.wake: asyncio.Event | None = None
        self.writer: AppendWriter | None = None
        self.failures: AppendWriter | None = None
        self._next_id = 0
        self._crowded_warned: set[tuple[str, ...]] = set()

    # ------------------------------------------------------------------ cluster

    def _init_ray(self) -> None:
        """Connect (or start a local Ray); keep this process's SIGTERM handler, which ray.init
        replaces (a SIGTERM must end the run like Ctrl-C: exit 130, resumable)."""
        ray, address = self.ray, self.cfg.ray.address
        _check_reachable(address or os.environ.get("RAY_ADDRESS") or "")
        main = threading.current_thread() is threading.main_thread()
        handler = signal.getsignal(signal.SIGTERM) if main else None
        try:
            # no address: RAY_ADDRESS, else a cluster `ray start` began on this machine, else a new
            # local Ray ("local": always a new one); the dashboard is not needed (a cluster's stays)
            ray.init(address=address, include_dashboard=False)
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = address or os.environ.get("RAY_ADDRESS") or "this machine"
            raise ClusterError(f"cannot connect to the Ray cluster at {where}: {_reason(e)}") from None
        finally:
            if main and handler is not None:
                signal.signal(signal.SIGTERM, handler)

    def _nodes(self) -> list[_Node]:
        """Alive nodes that can take a worker (``ray.num_cpus`` CPUs)."""
        need = self.cfg.ray.num_cpus
        return [
            _Node(n["NodeID"], n.get("NodeManagerAddress", ""), n.get("NodeManagerHostname", ""))
            for n in self.ray.nodes()
            if n.get("Alive") and float((n.get("Resources") or {}).get("CPU", 0.0)) >= need
        ]

    def _urls_for(self, node: _Node) -> tuple[str, ...]:
        mapping = self.cfg.ray.node_base_urls
        for key in (node.id, node.ip, node.hostname):
            if key in mapping:
                return tuple(mapping[key])
        return tuple(self.cfg.base_urls)

    def _check_mapping(self) -> None:
        nodes = self.ray.nodes()
        known = {
            k for n in nodes for k in (n["NodeID"], n.get("NodeManagerAddress"), n.get("NodeManagerHostname"))
        }
        unknown = sorted(set(self.cfg.ray.node_base_urls) - known)
        if unknown:
            logger.warning(
                f"ray.node_base_urls names no node of the cluster: {', '.join(unknown)} (nodes are named "
                "by IP, hostname or Ray node ID; nodes not named use base_urls)"
            )

    async def _start_worker(self, node: _Node, params: dict[str, Any] | None) -> tuple[_Worker, dict] | None:
        """Start one worker on ``node`` and its stream; None when it could not start (logged)."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        rc = self.cfg.ray
        name = f"w{self._next_id}"
        self._next_id += 1
        urls = self._urls_for(node)
        self.node_starts[node.id] += 1
        self.starting[node.id] += 1
        # the API key goes with start(), never in the actor's creation spec (kept by the cluster)
        worker_cfg = self.cfg.model_copy(update={"api_key": None})
        handle = self.remote.options(
            num_cpus=rc.num_cpus,
            max_restarts=0,
            max_task_retries=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.id, soft=False),
        ).remote(worker_cfg, name, list(urls))
        self.handles.append(handle)
        w = _Worker(name, handle, node, urls)
        try:
            info = await asyncio.wait_for(
                handle.start.remote(self.api_key, params, 1, 1), timeout=rc.start_timeout_s
            )
        except TimeoutError:
            self._kill(handle)
            logger.warning(
                f"ray: worker {name} on node {node.ip} ({node.id[:8]}) did not start in "
                f"{rc.start_timeout_s:g} s (--ray.start_timeout_s); not used"
            )
            return None
        except Exception as e:  # the actor died, its node left, or start() raised (e.g. no model listed)
            self._kill(handle)
            cause = getattr(e, "cause", None) or e
            logger.warning(
                f"ray: worker {name} on node {node.ip} ({node.id[:8]}) did not start: {_reason(cause)}"
            )
            return None
        finally:
            self.starting[node.id] -= 1
        w.pid = info.get("pid")
        self.workers[name] = w
        w.consumer = asyncio.create_task(self._consume(w))
        logger.info(f"ray: {w.where()} sends to {', '.join(info.get('urls') or urls)}")
        return w, info

    def _spawn(self, node: _Node) -> None:
        async def go() -> None:
            if await self._start_worker(node, self.params) is not None:
                self._rebalance()
            self.wake.set()  # type: ignore[union-attr]

        task = asyncio.create_task(go())
        self.start_tasks.add(task)
        task.add_done_callback(self.start_tasks.discard)

    async def _first_workers(self, first: dict | None) -> None:
        """Start the workers and learn the run's parameters (from the first worker when no model is
        given: the model its servers list); check them against the output's. Returns once one
        worker is up (the others join as they come up)."""
        cfg = self.cfg
        nodes = self._nodes()
        if not nodes:
            raise ClusterError(
                f"no node of the Ray cluster can take a worker (each needs --ray.num_cpus "
                f"{cfg.ray.num_cpus:g} CPUs): {len(self.ray.nodes())} nodes known"
            )
        if cfg.responses_create_params.model:
            self._set_params(first, request_params(cfg, cfg.responses_create_params.model))
        else:
            for node in nodes[:FIRST_WORKER_TRIES]:
                started = await self._start_worker(node, None)
                if started is not None:
                    self._set_params(first, started[1]["params"])
                    break
            else:
                raise ClusterError("no Ray worker could be started (see the lines above)")
        self._reconcile()
        while not self.workers and self.start_tasks:
            await asyncio.wait(set(self.start_tasks), return_when=asyncio.FIRST_COMPLETED)
        if not self.workers:
            raise ClusterError("no Ray worker could be started (see the lines above)")
        self._rebalance()

    def _set_params(self, first: dict | None, params: dict[str, Any]) -> None:
        self._check_same_params(first, params)
        self.params = params
        self.price = self.prices.lookup(params["model"])

    def _reconcile(self) -> None:
        """Give every alive node its workers: new nodes, and nodes whose worker died while they
        live (up to ``ray.max_worker_restarts`` more starts per node)."""
        rc = self.cfg.ray
        try:
            nodes = self._nodes()
        except Exception as e:  # the GCS is briefly unreachable: look again later
            logger.warning(f"ray: cannot list the cluster's nodes ({_reason(e)}); trying again")
            return
        for node in nodes:
            have = sum(1 for w in self.workers.values() if w.node.id == node.id) + self.starting[node.id]
            budget = rc.workers_per_node + rc.max_worker_restarts - self.node_starts[node.id]
            for _ in range(max(0, min(rc.workers_per_node - have, budget))):
                self._spawn(node)

    def _rebalance(self) -> None:
        """Split the parallelism between the workers that use the same servers; size their windows."""
        cfg = self.cfg
        groups: dict[tuple[str, ...], list[_Worker]] = defaultdict(list)
        for w in self.workers.values():
            groups[w.urls].append(w)
        for urls, ws in groups.items():
            n = len(ws)
            base, extra = divmod(cfg.num_samples_in_parallel, n)
            minimum = max(1, cfg.retry.min_parallel // n)
            if base == 0 and urls not in self._crowded_warned:
                self._crowded_warned.add(urls)
                logger.warning(
                    f"ray: {n} workers send to {', '.join(urls)} with --num_samples_in_parallel "
                    f"{cfg.num_samples_in_parallel}: each keeps one request in flight ({n} in all)"
                )
            for i, w in enumerate(sorted(ws, key=lambda w: int(w.name[1:]))):
                share = max(1, base + (1 if i < extra else 0))
                w.window = cfg.ray.window or 2 * share + 2 * cfg.verify.workers + 16
                if (share, minimum) != (w.share, w.minimum) or not w.stats:
                    w.share, w.minimum = share, minimum
                    w.handle.set_share.remote(share, minimum, w.order())
        # each server's /metrics is scraped by one worker (the oldest that sends to it)
        scrapers: dict[str, _Worker] = {}
        for w in sorted(self.workers.values(), key=lambda w: int(w.name[1:])):
            for url in w.urls:
                scrapers.setdefault(url, w)
        for w in self.workers.values():
            mine = tuple(url for url, s in scrapers.items() if s is w)
            if mine != w.scrapes:
                w.scrapes = mine
                w.handle.scrape.remote(list(mine), w.order())

    def _kill(self, handle: Any) -> None:
        with contextlib.suppress(Exception):
            self.ray.kill(handle, no_restart=True)

    # ------------------------------------------------------------------ results

    async def _consume(self, w: _Worker) -> None:
        """Read a worker's batches until its stream fails; then it is lost."""
        try:
            async for ref in w.handle.stream.remote():
                batch = await ref
                if not w.alive:
                    return
                self._apply(w, batch)
            error = "its stream ended"
        except asyncio.CancelledError:
            raise
        except Exception as e:  # ActorDiedError, a node lost, an actor killed
            error = _reason(e)
        self._lost(w, error)

    def _apply(self, w: _Worker, batch: dict[str, Any]) -> None:
        """Write a batch's records and failures (each pair once), pass on its log lines and pauses
        (pauses first: the other workers' requests go on until theirs arrives)."""
        for seconds, _status in batch["pauses"]:
            for other in self.workers.values():
                if other is not w and other.urls == w.urls:
                    other.handle.pause.remote(seconds)
        for level, message, when in batch["logs"]:
            # tagged lines ([collect], [server]) as the worker logged them; others say whose they are
            text = message if message.startswith("[") else f"ray worker {w.name}: {message}"
            logger.patch(lambda rec, when=when: rec.update(time=when)).log(level, text)
        try:
            for record in batch["records"]:
                if self._settle(record_key(record)):
                    self.writer.write(record)  # type: ignore[union-attr]
                    usage = record.get("usage") or {}  # the completion stayed on the worker
                    self._count(
                        record, int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
                    )
            for failure in batch["failures"]:
                if self._settle(record_key(failure)):
                    self.failures.write(failure)  # type: ignore[union-attr]
                    self.result.failed += 1
        except OutputWriteError as e:
            self.fatal = e
        w.stats = batch["stats"]
        if batch.get("fatal") and self.fatal is None:
            self.fatal = ClusterError(f"a Ray worker failed: {batch['fatal']}")
        self.wake.set()  # type: ignore[union-attr]

    def _settle(self, key: Key) -> bool:
        """Whether a result for ``key`` is the one to write (the pair is outstanding); it no longer is."""
        owner = self.outstanding.pop(key, None)
        if owner is None:
            self.dropped += 1
            return False
        owner[0].outstanding -= 1
        return True

    def _lost(self, w: _Worker, error: str) -> None:
        """A worker is gone: its unfinished pairs go back to be handed out again."""
        if not w.alive:
            return
        cfg = self.cfg
        w.alive = False
        self.workers.pop(w.name, None)
        self.gone_stats.append(w.stats)
        self._kill(w.handle)
        again = given_up = 0
        for key, (owner, task) in list(self.outstanding.items()):
            if owner is not w:
                continue
            del self.outstanding[key]
            rep = key[1]
            task.losses[rep] = task.losses.get(rep, 0) + 1
            if task.losses[rep] >= cfg.ray.max_pair_losses:
                given_up += 1
                self._give_up(task, rep, error)
            else:
                again += 1
                self.requeued.append((task, rep))
        w.outstanding = 0
        self.lost += 1
        logger.warning(
            f"ray: {w.where()} lost ({error}); its {again} unfinished pairs go to the other workers"
            + (
                f", {given_up} lost with {cfg.ray.max_pair_losses} workers go to the failures file"
                if given_up
                else ""
            )
        )
        self._rebalance()
        self.check_now = True
        self.wake.set()  # type: ignore[union-attr]

    def _give_up(self, task: _Task, rep: int, error: str) -> None:
        try:
            self.failures.write(  # type: ignore[union-attr]
                {
                    "task_index": task.index,
                    "repeat_index": rep,
                    "error": f"lost with {task.losses[rep]} Ray workers (the last: {error})",
                    "kind": "WorkerLost",
                    "status": None,
                    "attempts": task.losses[rep],
                    "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
                }
            )
        except OutputWriteError as e:
            self.fatal = e
        self.result.failed += 1

    # ------------------------------------------------------------------ handing out

    def _pairs(self, todo: Any) -> Iterator[tuple[_Task, int]]:
        """The pairs to do, in file order, read from the task file as they are handed out."""
        if hasattr(todo, "repeats_of"):  # the runner's compact pair set
            wanted, repeats_of = todo, todo.repeats_of
        else:  # task index -> repeats
            wanted, repeats_of = set(todo), todo.__getitem__
        for ti, row, messages in iter_tasks(self.cfg.input_jsonl_fpath, wanted, self.env):
            task = _Task(ti, row, messages)
            for rep in repeats_of(ti):
                yield task, rep

    def _take(self, source: Iterator[tuple[_Task, int]], n: int) -> list[tuple[_Task, int]]:
        out: list[tuple[_Task, int]] = []
        while len(out) < n and self.requeued:
            out.append(self.requeued.popleft())
        while len(out) < n and not self.exhausted:
            nxt = next(source, None)
            if nxt is None:
                self.exhausted = True
            else:
                out.append(nxt)
        return out

    def _fill(self, source: Iterator[tuple[_Task, int]]) -> None:
        """Hand pairs to the workers with room in their window (the emptiest first)."""
        for w in sorted(self.workers.values(), key=lambda w: w.outstanding / w.window):
            free = w.window - w.outstanding
            if free <= 0 or (free < max(1, w.window // 4) and w.outstanding > 0):
                continue
            batch = self._take(source, free)
            if not batch:
                return
            for task, rep in batch:
                self.outstanding[(task.index, rep)] = (w, task)
            w.outstanding += len(batch)
            w.handle.submit.remote([(t.index, rep, t.row, t.messages) for t, rep in batch])

    def _total(self, name: str) -> int:
        return sum(int(s.get(name, 0)) for s in [*self.gone_stats, *(w.stats for w in self.workers.values())])

    def _postfix(self) -> str:
        r = self.result
        live = [w.stats for w in self.workers.values()]
        parts = [
            f"reward={self.reward_sum / self.reward_n:.3f}" if self.reward_n else "reward=-",
            f"par={sum(s.get('inflight', 0) for s in live)}/{sum(s.get('current', 0) for s in live)}",
            f"429s={self._total('rate_limited')}",
            f"fail={r.failed}",
            f"workers={len(self.workers)}",
        ]
        if r.cost is not None and r.written:
            parts.append(f"cost={r.cost:.4f}/~{r.cost / r.written * r.todo:.4f}")
        return " ".join(parts)

    # ------------------------------------------------------------------ the run

    async def _run(self) -> CollectResult:
        r = await super()._run()
        live = [w.stats for w in self.workers.values()] or self.gone_stats[-1:]
        if live and live[0]:
            r.min_parallel = sum(int(s.get("min_seen", 0)) for s in live)
            r.final_parallel = sum(int(s.get("current", 0)) for s in live)
        return r

    async def _collect(self, sel: TaskSelection, todo: Any, first: dict | None) -> None:
        cfg, r = self.cfg, self.result
        out = cfg.output_jsonl_fpath
        self.ray = import_ray()
        self.wake = asyncio.Event()
        self.api_key = resolve_api_key(cfg)
        self._init_ray()
        self.remote = self.ray.remote(CollectWorker)
        try:
            with (
                AppendWriter(out) as writer,
                AppendWriter(failures_path(out), lazy=True) as failures,
            ):
                self.writer, self.failures = writer, failures
                await self._first_workers(first)
                self._check_mapping()
                nodes = len(self._nodes())
                logger.info(
                    f"collecting {r.todo} samples ({len(todo)} tasks x up to {cfg.num_repeats}) with "
                    f"{self.params['model']} on Ray: {nodes} nodes x {cfg.ray.workers_per_node} workers, "  # type: ignore[index]
                    f"parallelism {cfg.num_samples_in_parallel} per set of servers"
                    + ("" if self.verify else " (unscored)")
                )
                progress = Progress(cfg.progress, r.todo + r.already_done, r.already_done)
                refresher = asyncio.create_task(self._refresh(progress))
                try:
                    await self._drive(self._pairs(todo))
                except asyncio.CancelledError:
                    r.interrupted = True
                    raise
                finally:
                    refresher.cancel()
                    progress.refresh(r.already_done + r.written + r.failed, self._postfix())
                    progress.close()
                    r.rate_limited = self._total("rate_limited")
                    r.retries = self._total("retries")
                    r.pauses = self._total("pauses")
        finally:
            await self._stop_workers()
            with contextlib.suppress(Exception):
                self.ray.shutdown()
        if self.lost or self.dropped:
            logger.info(
                f"ray: {self.lost} workers lost during the run; {self.dropped} results for pairs "
                "already written were dropped"
            )

    async def _drive(self, source: Iterator[tuple[_Task, int]]) -> None:
        rc = self.cfg.ray
        wake = self.wake
        assert wake is not None
        next_check = time.monotonic() + rc.check_interval_s
        alone_since: float | None = None
        while True:
            wake.clear()
            if self.fatal is not None:
                raise self.fatal
            self._fill(source)
            if self.exhausted and not self.requeued and not self.outstanding:
                return
            now = time.monotonic()
            if self.workers:
                alone_since = None
            else:
                alone_since = alone_since or now
                if now - alone_since > rc.no_worker_timeout_s:
                    left = len(self.requeued) + len(self.outstanding)
                    raise ClusterError(
                        f"no Ray worker alive for {rc.no_worker_timeout_s:g} s (--ray.no_worker_timeout_s) "
                        f"with {left}{'' if self.exhausted else '+'} pairs to go; every record written is "
                        "kept: run the same command again to resume once the cluster is back"
                    )
            if now >= next_check or self.check_now:
                self.check_now = False
                self._reconcile()
                next_check = now + rc.check_interval_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), timeout=max(0.05, min(1.0, next_check - now)))

    async def _stop_workers(self) -> None:
        tasks = [*self.start_tasks, *(w.consumer for w in self.workers.values() if w.consumer)]
        for task in tasks:
            task.cancel()
        for handle in self.handles:
            self._kill(handle)
        await asyncio.gather(*tasks, return_exceptions=True)


async def collect_ray(cfg: CollectConfig) -> CollectResult:
    import_ray()  # fail before scanning the task file
    return await RayCollector(cfg).run()
