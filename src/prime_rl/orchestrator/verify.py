"""Scoring off the event loop: a process pool with a per-call timeout.

A verifier that raises or hangs never takes the run down: the rollout gets reward 0 and its
``error`` says why (counted and reported per step). A call that exceeds the timeout leaves its
worker busy forever, so the pool is replaced and the stuck processes are killed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import time
from dataclasses import dataclass
from typing import Any

from loguru import logger

from prime_rl.envs.base import Environment, Task, load_env

_WORKER_ENV: Environment | None = None


def _init_worker(name: str, options: dict[str, Any]) -> None:
    global _WORKER_ENV
    _WORKER_ENV = load_env(name, options)


def _score_in_worker(task: Task, completion: str) -> tuple[float, dict[str, float], float]:
    assert _WORKER_ENV is not None
    start = time.perf_counter()
    score = _WORKER_ENV.score(task, completion)
    return (
        float(score.reward),
        {k: float(v) for k, v in score.metrics.items()},
        (time.perf_counter() - start) * 1000.0,
    )


@dataclass
class Verdict:
    reward: float
    metrics: dict[str, float]
    error: str | None
    ms: float
    """Time inside score() (the verifier's own cost; for a failure, the time until it failed)."""
    latency_ms: float = 0.0
    """Submit-to-result time, including waiting for a free worker."""


class VerifierPool:
    """Scores completions with the named environment in ``workers`` processes."""

    def __init__(self, env_name: str, env_options: dict[str, Any], workers: int, timeout_s: float):
        load_env(env_name, env_options)  # fail here, with the env named, not in a worker
        self.env_name, self.env_options, self.workers, self.timeout_s = (
            env_name,
            env_options,
            workers,
            timeout_s,
        )
        self._pool = self._new_pool()

    def _new_pool(self) -> concurrent.futures.ProcessPoolExecutor:
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(self.env_name, self.env_options),
        )

    async def score(self, task: Task, completion: str) -> Verdict:
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        pool = self._pool
        try:
            future = loop.run_in_executor(pool, _score_in_worker, task, completion)
            reward, metrics, ms = await asyncio.wait_for(future, timeout=self.timeout_s)
            return Verdict(reward, metrics, None, ms, (time.monotonic() - start) * 1000.0)
        except TimeoutError:
            self._recycle(pool)
            return Verdict(
                0.0,
                {},
                f"verifier timed out after {self.timeout_s:.1f}s",
                (time.monotonic() - start) * 1000.0,
            )
        except concurrent.futures.process.BrokenProcessPool as e:
            self._recycle(pool)
            return Verdict(0.0, {}, f"verifier process died: {e}", (time.monotonic() - start) * 1000.0)
        except Exception as e:  # the verifier raised: data, not a crash
            return Verdict(
                0.0, {}, f"verifier raised {type(e).__name__}: {e}", (time.monotonic() - start) * 1000.0
            )

    def _recycle(self, pool: concurrent.futures.ProcessPoolExecutor) -> None:
        if pool is not self._pool:
            return  # another call already replaced it
        logger.warning(f"verifier pool of {self.env_name!r} replaced (a call hung or a worker died)")
        self._pool = self._new_pool()
        processes = list(getattr(pool, "_processes", {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.kill()

    def close(self) -> None:
        processes = list(getattr(self._pool, "_processes", {}).values())
        self._pool.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            p.kill()
