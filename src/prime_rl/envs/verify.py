"""Scoring off the event loop: long-lived worker processes with a per-call timeout.

Each worker process builds the environment once and answers one call at a time (``score`` of a
completion, or ``step`` of an episode: :meth:`prime_rl.envs.base.Environment.step`), talking to
the event loop over its own pipe. A verifier that raises, or gives a reward or metric that is no
finite number, never takes the run down: the rollout gets reward 0 and its ``error`` says why
(counted and reported per step). A call that exceeds the timeout, or a worker that dies, costs
only that worker: it is killed and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from loguru import logger

from prime_rl.envs.base import Task, Turn, plain_score
from prime_rl.envs.registry import load_env


def _worker_main(conn: Connection, env_name: str, options: dict[str, Any]) -> None:
    env = load_env(env_name, options)
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        kind, task, arg = msg
        start = time.perf_counter()
        try:
            if kind == "step":
                turn = env.step(task, arg)
                if not isinstance(turn, Turn):
                    raise TypeError(f"step() returned {type(turn).__name__}, not a Turn")
                reply = ("ok", _plain_turn(turn), {}, None)
            else:
                score = plain_score(env.score(task, arg))
                reply = ("ok", score.reward, score.metrics, score.answer)
        except Exception as e:  # reported to the orchestrator as data
            what = "environment" if kind == "step" else "verifier"
            reply = ("error", f"{what} raised {type(e).__name__}: {e}", {}, None)
        conn.send((*reply, (time.perf_counter() - start) * 1000.0))


def _plain_turn(turn: Turn) -> Turn:
    """The turn with plain, finite floats in its score (what crosses the pipe is checked here, once)."""
    if turn.score is None:
        return turn
    return Turn(turn.messages, plain_score(turn.score), turn.tool_ms, turn.tool_errors)


@dataclass
class Verdict:
    reward: float
    metrics: dict[str, float]
    error: str | None
    ms: float
    """Time inside score() (the verifier's own cost; for a timeout, the timeout)."""
    latency_ms: float = 0.0
    """Submit-to-result time, including waiting for a free worker."""
    answer: str | None = None
    """The answer the verifier extracted (for majority voting), if it reports one."""
    turn: Turn | None = None
    """For a ``step`` call that succeeded: the environment's answer."""


class _Worker:
    def __init__(self, ctx, env_name: str, options: dict[str, Any]):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, env_name, options), daemon=True)
        self.process.start()
        child.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class VerifierPool:
    """Scores completions with the named environment in ``workers`` processes."""

    def __init__(self, env_name: str, env_options: dict[str, Any], workers: int, timeout_s: float):
        load_env(env_name, env_options)  # fail here, with the env named, not in a worker
        self.env_name, self.env_options, self.timeout_s = env_name, env_options, timeout_s
        self._ctx = multiprocessing.get_context("spawn")
        self._workers = [self._spawn() for _ in range(workers)]
        self._idle: asyncio.Queue[_Worker] | None = None

    def _spawn(self) -> _Worker:
        return _Worker(self._ctx, self.env_name, self.env_options)

    def _queue(self) -> asyncio.Queue[_Worker]:
        if self._idle is None:  # created on first use, inside the running loop
            self._idle = asyncio.Queue()
            for w in self._workers:
                self._idle.put_nowait(w)
        return self._idle

    async def score(self, task: Task, completion: str) -> Verdict:
        """Score one completion (reward 0 and ``error`` set when the verifier fails)."""
        return await self._call("score", task, completion)

    async def step(self, task: Task, messages: list[dict[str, Any]]) -> Verdict:
        """One episode step: ``turn`` set on success; on failure ``error`` says why (the
        episode then ends with reward 0)."""
        verdict = await self._call("step", task, messages)
        if verdict.turn is not None and verdict.turn.score is not None:
            s = verdict.turn.score
            verdict.reward, verdict.metrics, verdict.answer = s.reward, s.metrics, s.answer
        return verdict

    async def _call(self, kind: str, task: Task, arg: Any) -> Verdict:
        idle = self._queue()
        submitted = time.monotonic()
        worker = await idle.get()
        loop = asyncio.get_running_loop()
        ready = loop.create_future()
        fd = worker.conn.fileno()
        try:
            worker.conn.send((kind, task, arg))
            loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
            try:
                await asyncio.wait_for(ready, timeout=self.timeout_s)
            finally:
                loop.remove_reader(fd)
            status, value, metrics, answer, ms = worker.conn.recv()
        except TimeoutError:
            self._replace(worker, f"a call took over {self.timeout_s:.1f}s")
            return Verdict(
                0.0,
                {},
                f"verifier timed out after {self.timeout_s:.1f}s",
                self.timeout_s * 1000.0,
                (time.monotonic() - submitted) * 1000.0,
            )
        except (EOFError, OSError, BrokenPipeError) as e:
            code = worker.process.exitcode
            self._replace(worker, f"it died (exit code {code})")
            return Verdict(
                0.0,
                {},
                f"verifier process died (exit code {code}): {type(e).__name__}",
                0.0,
                (time.monotonic() - submitted) * 1000.0,
            )
        idle.put_nowait(worker)
        latency = (time.monotonic() - submitted) * 1000.0
        if status == "ok" and kind == "step":
            return Verdict(0.0, {}, None, ms, latency, None, value)
        if status == "ok":
            return Verdict(value, metrics, None, ms, latency, answer)
        return Verdict(0.0, {}, value, ms, latency)

    def _replace(self, worker: _Worker, why: str) -> None:
        logger.warning(f"verifier worker of {self.env_name!r} replaced: {why}")
        worker.kill()
        fresh = self._spawn()
        self._workers = [fresh if w is worker else w for w in self._workers]
        self._queue().put_nowait(fresh)

    def close(self) -> None:
        for w in self._workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in self._workers:
            w.process.join(timeout=2)
            w.kill()
