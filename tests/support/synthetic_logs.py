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
)


@dataclass
class SyntheticRun:
    orchestrator: list[str] = field(default_factory=list)
    inference: list[str] = field(default_factory=list)
    trainer: list[str] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

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


def _r1(x: float) -> float:
    """The value as the log shows it (durations carry one decimal)."""
    return float(f"{x:.1f}")


def _line(wall: float, text: str) -> str:
    stamp = datetime.fromtimestamp(wall).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return f"{stamp} | INFO    | {text}"


def make_run(
    scenario: str, steps: int = 20, seed: int = 0, async_level: int = 1, start_offset_s: float = 0.0
) -> SyntheticRun:
    """Logs of a ``steps``-step run shaped like ``scenario`` (one of :data:`SCENARIOS`)."""
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}")
    rng = random.Random(seed)
    run = SyntheticRun()
    wall = datetime(2026, 1, 1, 12, 0, 0).timestamp() + start_offset_s
    mono = 1000.0 + start_offset_s
    gen_ms = 8000.0 if scenario == "generation_bound" else 1500.0
    for step in range(steps):
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
            queue = (
                rng.uniform(20000, 40000) if scenario == "frontend_queue_saturation" else rng.uniform(1, 6)
            )
            recv_gap = queue * 0.95
            run.orchestrator.append(
                _line(
                    wall,
                    format_tagged(
                        "weights", "client.send", tid, url="http://h:8000", path="/update_weights", t=mono
                    ),
                )
            )
            run.inference.append(
                _line(
                    wall + recv_gap / 1000.0,
                    format_tagged(
                        "weights", "server.recv", tid, path="/update_weights", t=mono + recv_gap / 1000.0
                    ),
                )
            )
            run.inference.append(
                _line(
                    wall + recv_gap / 1000.0,
                    format_tagged(
                        "weights", "rpc.start", tid, op="update_weights", t=mono + recv_gap / 1000.0
                    ),
                )
            )
            end = (queue + rpc) / 1000.0
            run.inference.append(
                _line(
                    wall + end,
                    format_tagged("weights", "rpc.done", tid, op="update_weights", t=mono + end, rpc_ms=rpc),
                )
            )
            wall_ms = queue + rpc
            run.orchestrator.append(
                _line(
                    wall + end,
                    format_tagged(
                        "weights", "client.done", tid, wall_ms=wall_ms, rpc_ms=rpc, queue_ms=wall_ms - rpc
                    ),
                )
            )
            run.add("queue_ms", _r1(wall_ms - rpc))
            run.add("rpc_ms", _r1(rpc))
            wall += end
            mono += end
        run.orchestrator.append(
            _line(wall, format_tagged("gen", "batch.start", step=step, inflight=64, target_batch=256))
        )
        dur = gen_ms * rng.uniform(0.9, 1.1)
        if scenario == "rate_limited":
            for _ in range(10):
                run.orchestrator.append(
                    _line(
                        wall,
                        format_tagged(
                            "gen", "request.retry", url="http://h", status=429, attempt=1, wait_ms=500.0
                        ),
                    )
                )
        wall += dur / 1000.0
        mono += dur / 1000.0
        run.orchestrator.append(
            _line(
                wall, format_tagged("gen", "batch.done", step=step, completions=256, dur_ms=dur, inflight=64)
            )
        )
        run.add("gen_dur_ms", _r1(dur))
        verify = dur * 2 if scenario == "verification_bound" else 30.0
        run.orchestrator.append(
            _line(wall, format_tagged("verify", "batch.done", step=step, completions=256, dur_ms=verify))
        )
        run.add("verify_dur_ms", _r1(verify))
        staleness = min(step, async_level)
        trunc = 25.0 if scenario == "generation_bound" else 2.0
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
        train_wait = 0.8 * dur if scenario == "generation_bound" else 30.0
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
