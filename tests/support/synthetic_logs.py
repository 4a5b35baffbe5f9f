"""Synthetic orchestrator/inference/trainer logs for analyzer tests and its speed benchmark.

Lines are produced with the real formatter (:func:`prime_rl.tracing.format_tagged`) behind
loguru's file prefix, so they are exactly what the processes write. Each scenario shapes the
timings of one kind of bottleneck; the values used are returned so tests can check the
statistics independently.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from prime_rl.tracing import format_tagged

SCENARIOS = (
    "healthy",
    "frontend_queue_saturation",
    "slow_reload",
    "checkpoint_io",
    "trainer_bound",
    "generation_bound",
    "verification_bound",
    "rate_limited",
    "kv_cache_pressure",
)


@dataclass
class SyntheticRun:
    orchestrator: list[str] = field(default_factory=list)
    inference: list[str] = field(default_factory=list)
    trainer: list[str] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)
    servers: dict[str, list[str]] = field(default_factory=dict)
    """With several servers: each server's log lines by file stem (``inference_1`` ...); the first
    server's go to ``inference``."""

    def add(self, key: str, value: float) -> None:
        self.values.setdefault(key, []).append(value)

    def write(self, root: Path, gz: bool = False) -> dict[str, Path]:
        import gzip

        root.mkdir(parents=True, exist_ok=True)
        out = {}
        for name, lines in (
            ("orchestrator", self.orchestrator),
            ("inference", self.inference),
            ("trainer", self.trainer),
            *self.servers.items(),
        ):
            path = root / (f"{name}.log.gz" if gz else f"{name}.log")
            data = ("\n".join(lines) + "\n").encode()
            if gz:
                with gzip.open(path, "wb") as f:
                    f.write(data)
            else:
                path.write_bytes(data)
            out[name] = path
        return out


@dataclass
class Shape:
    """Knobs of :func:`make_run` beyond the scenario (None: the scenario's value)."""

    servers: int = 1
    """Inference servers; every update fans out to all of them under one trace id."""
    slow_server: int | None = None
    """Index of a server whose reload takes ``slow_factor`` times as long."""
    slow_servers: tuple[int, ...] = ()
    """Indices of more servers as slow."""
    slow_factor: float = 5.0
    rpc_ms: float | None = None
    """Median reload time per update."""
    gen_ms: float | None = None
    verify_ms: float | None = None
    """Summed scoring time per batch ([verify] dur_ms)."""
    trunc_pct: float | None = None
    train_wait_frac: float | None = None
    """The trainer's wait for rollouts as a fraction of the batch time."""
    console: bool = False
    """Write the inference logs as a console capture: ``HH:MM:SS.mmm | LEVEL | message``, no date."""
    server_metrics: bool = False
    """Scrape every server's /metrics every ``SCRAPE_S`` of generation (``[server] metrics`` lines in
    the orchestrator log) at a healthy load; scenario ``kv_cache_pressure`` always does, under pressure."""


def _r1(x: float) -> float:
    """The value as the log shows it (durations carry one decimal)."""
    return float(f"{x:.1f}")


def _line(wall: float, text: str, console: bool = False) -> str:
    stamp = datetime.fromtimestamp(wall).strftime("%H:%M:%S.%f" if console else "%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp} | INFO    | {text}"


def make_run(
    scenario: str,
    steps: int = 20,
    seed: int = 0,
    async_level: int = 1,
    start_offset_s: float = 0.0,
    shape: Shape | None = None,
    first_step: int = 0,
) -> SyntheticRun:
    """Logs of a ``steps``-step run shaped like ``scenario`` (one of :data:`SCENARIOS`), changed by
    ``shape``; steps count from ``first_step`` (a resumed run)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    shape = shape or Shape()
    rng = random.Random(seed)
    run = SyntheticRun()
    wall = datetime(2026, 1, 1, 12, 0, 0).timestamp() + start_offset_s
    mono = 1000.0 + start_offset_s
    kv_pressure = scenario == "kv_cache_pressure"
    gen_bound = scenario == "generation_bound" or kv_pressure  # the pressure is what makes generation slow
    gen_ms = shape.gen_ms or (8000.0 if gen_bound else 1500.0)
    scraper = _Scraper(random.Random(seed + 1), kv_pressure) if kv_pressure or shape.server_metrics else None
    server_logs = [run.inference] + [
        run.servers.setdefault(f"inference_{k}", []) for k in range(1, shape.servers)
    ]
    for step in range(first_step, first_step + steps):
        # the barrier: wait for weights, then one update per step after the first async_level steps
        if step > async_level:
            wait = 6000.0 if scenario in ("checkpoint_io", "trainer_bound") else 20.0
            wait *= rng.uniform(0.8, 1.2)
            run.orchestrator.append(
                _line(wall, format_tagged("ckpt", "wait.start", target_step=step - async_level))
            )
            wall += wait / 1000.0
            mono += wait / 1000.0
            run.orchestrator.append(
                _line(wall, format_tagged("ckpt", "wait.done", target_step=step - async_level, wait_ms=wait))
            )
            run.add("ckpt_wait_ms", _r1(wait))
            write = wait * 0.9 if scenario == "checkpoint_io" else 40.0
            run.trainer.append(
                _line(
                    wall - 0.05, format_tagged("ckpt", "write.done", step=step - async_level, write_ms=write)
                )
            )
            run.add("write_ms", _r1(write))
            tid = f"t{step:04d}"
            rpc = rng.uniform(20000, 30000) if scenario == "slow_reload" else rng.uniform(150, 250)
            if shape.rpc_ms is not None:
                rpc = shape.rpc_ms * rpc / 200.0 if scenario != "slow_reload" else shape.rpc_ms
            queue = (
                rng.uniform(20000, 40000) if scenario == "frontend_queue_saturation" else rng.uniform(1, 6)
            )
            longest = 0.0
            for k, server_log in enumerate(server_logs):
                url = "http://h:8000" if k == 0 else f"http://h{k}:8000"
                k_rpc = (
                    rpc
                    * (shape.slow_factor if k == shape.slow_server or k in shape.slow_servers else 1.0)
                    * (1 + 0.01 * k)
                )
                longest = max(
                    longest,
                    _server_update(run, server_log, tid, url, wall, mono, queue, k_rpc, shape.console),
                )
            wall += longest
            mono += longest
        run.orchestrator.append(
            _line(wall, format_tagged("gen", "batch.start", step=step, inflight=64, target_batch=256))
        )
        dur = gen_ms * rng.uniform(0.9, 1.1)
        retry_url = "http://h:8000"
        if scenario == "rate_limited":
            for _ in range(10):
                run.orchestrator.append(
                    _line(
                        wall,
                        format_tagged(
                            "gen", "request.retry", url=retry_url, status=429, attempt=1, wait_ms=500.0
                        ),
                    )
                )
        if scraper is not None:
            scraper.scrape_until(run, wall, wall + dur / 1000.0, shape.servers)
        wall += dur / 1000.0
        mono += dur / 1000.0
        run.orchestrator.append(
            _line(
                wall, format_tagged("gen", "batch.done", step=step, completions=256, dur_ms=dur, inflight=64)
            )
        )
        run.add("gen_dur_ms", _r1(dur))
        verify = dur * 2 if scenario == "verification_bound" else 30.0
        if shape.verify_ms is not None:
            verify = shape.verify_ms * dur / gen_ms
        run.orchestrator.append(
            _line(wall, format_tagged("verify", "batch.done", step=step, completions=256, dur_ms=verify))
        )
        run.add("verify_dur_ms", _r1(verify))
        staleness = min(step, async_level)
        trunc = (
            shape.trunc_pct
            if shape.trunc_pct is not None
            else 25.0
            if scenario == "generation_bound"
            else 2.0
        )
        run.orchestrator.append(
            _line(
                wall,
                format_tagged(
                    "rollout",
                    None,
                    trunc_pct=trunc,
                    current_step=step,
                    ckpt_step=step - staleness,
                    staleness=staleness,
                ),
            )
        )
        run.add("trunc_pct", trunc)
        run.add("staleness", staleness)
        run.orchestrator.append(
            _line(wall, f"step {step} | reward 0.5 | some unrelated log text [with brackets]")
        )
        train_wait = 0.8 * dur if gen_bound else 30.0
        if shape.train_wait_frac is not None:
            train_wait = shape.train_wait_frac * dur
        run.trainer.append(
            _line(
                wall,
                format_tagged(
                    "train", "step.done", step=step, wait_ms=train_wait, train_ms=1200.0, write_ms=40.0
                ),
            )
        )
        if step > 0:  # step 0's wait is start-up: the analyzer leaves it out
            run.add("train_wait_ms", _r1(train_wait))
    return run


def _server_update(
    run: SyntheticRun,
    server_log: list[str],
    tid: str,
    url: str,
    wall: float,
    mono: float,
    queue: float,
    rpc: float,
    console: bool,
) -> float:
    """One server's part of one update (client and server lines); returns its wall time in seconds."""
    recv_gap = queue * 0.95
    run.orchestrator.append(
        _line(
            wall,
            format_tagged(
                "weights",
                "client.send",
                tid,
                url=url,
                path="/update_weights",
                t=mono,
                attempt=1,
                background=False,
            ),
        )
    )
    at = recv_gap / 1000.0
    server_log.append(
        _line(
            wall + at,
            format_tagged("weights", "server.recv", tid, path="/update_weights", t=mono + at),
            console,
        )
    )
    server_log.append(
        _line(
            wall + at, format_tagged("weights", "rpc.start", tid, op="update_weights", t=mono + at), console
        )
    )
    end = (queue + rpc) / 1000.0
    server_log.append(
        _line(
            wall + end,
            format_tagged("weights", "rpc.done", tid, op="update_weights", t=mono + end, rpc_ms=rpc),
            console,
        )
    )
    wall_ms = queue + rpc
    run.orchestrator.append(
        _line(
            wall + end,
            format_tagged(
                "weights", "client.done", tid, url=url, wall_ms=wall_ms, rpc_ms=rpc, queue_ms=wall_ms - rpc
            ),
        )
    )
    run.add("queue_ms", _r1(wall_ms - rpc))
    run.add("rpc_ms", _r1(rpc))
    return end


SCRAPE_S = 5.0
"""Seconds between two scrapes of a server's /metrics in the synthetic logs."""


class _Scraper:
    """``[server] metrics`` lines of every server while batches generate, one per ``SCRAPE_S``:
    healthy (KV cache 20-60% full, nothing waiting, no preemption) or under KV-cache pressure
    (92-100% full, 4-20 waiting, 2-4 preemptions per scrape: about 36 a minute). Its own random
    generator, so the other lines of a scenario stay as they were."""

    def __init__(self, rng: random.Random, pressure: bool):
        self.rng, self.pressure = rng, pressure
        self.next_at: float | None = None
        self.preemptions: dict[str, int] = {}

    def scrape_until(self, run: SyntheticRun, now: float, end: float, servers: int) -> None:
        """Scrape from the next scrape due (``now`` at the first) to wall time ``end`` (exclusive)."""
        at = max(self.next_at or now, now)
        rng = self.rng
        while at < end:
            for k in range(servers):
                url = "http://h:8000" if k == 0 else f"http://h{k}:8000"
                before = self.preemptions.setdefault(url, 7)  # the server preempted before the run
                if self.pressure:
                    kv, waiting, preempted = rng.uniform(92, 100), rng.randint(4, 20), rng.randint(2, 4)
                    queue = rng.uniform(2000, 6000)
                else:
                    kv, waiting, preempted, queue = rng.uniform(20, 60), 0, 0, rng.uniform(1, 20)
                self.preemptions[url] = before + preempted
                fields = dict(
                    url=url,
                    running=rng.randint(8, 32),
                    waiting=waiting,
                    kv_cache_pct=round(kv, 2),
                    preemptions=before + preempted,
                    queue_ms=queue,
                    queue_p50_ms=queue,
                    ttft_ms=queue + 40.0,
                    ttft_p50_ms=queue + 40.0,
                    requests=rng.randint(10, 40),
                    scrape_ms=3.0,
                )
                run.orchestrator.append(_line(at, format_tagged("server", "metrics", **fields)))
                run.add(f"kv_cache_pct {url}", fields["kv_cache_pct"])
                run.add(f"preempted {url}", float(preempted))
            at += SCRAPE_S
        self.next_at = at


def appended(logs: Path, *runs: SyntheticRun) -> list[Path]:
    """The runs' logs appended file by file under ``logs`` (made), as ``rl --resume`` appends to
    logs/*.log: the orchestrator's, the inference server's and the trainer's paths, then each other
    server's (``inference_1`` ...) of runs with several."""
    logs.mkdir(parents=True, exist_ok=True)
    names = ["orchestrator", "inference", "trainer"]
    names += sorted({name for run in runs for name in run.servers})
    paths = []
    for name in names:
        path = logs / f"{name}.log"
        lines = (
            line
            for run in runs
            for line in (run.servers.get(name, []) if name in run.servers else getattr(run, name))
        )
        path.write_text("\n".join(lines) + "\n")
        paths.append(path)
    return paths
