"""Environments that misbehave on purpose, for fault tests (loaded by file spec, see ``tests.support.FAULTY_ENV``)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from prime_rl.envs.base import Environment, Score, Task, user_prompt


class FaultyEnv(Environment):
    """Gives reward 1.0 to every completion, except on every ``every``-th task (by its ``n``, not
    the completion): there 'raise' raises, 'hang' sleeps far past any timeout, 'die' kills the
    worker process, 'nan' gives the reward NaN and 'inf_metric' a metric of inf. 'slow' makes every
    call take ``delay_s`` and never fails."""

    def __init__(self, mode: str = "raise", every: int = 2, delay_s: float = 0.05):
        self.mode, self.every, self.delay_s = mode, every, delay_s

    def tasks(self, seed: int) -> Iterator[Task]:
        i = 0
        while True:
            yield {"id": f"faulty-{i}", "prompt": user_prompt(f"Say anything ({i})."), "n": i}
            i += 1

    def score(self, task: Task, completion: str) -> Score:
        if self.mode == "slow":  # an expensive verifier: every call takes delay_s
            time.sleep(self.delay_s)
            return Score(reward=1.0, metrics={"ok": 1.0})
        if int(task["n"]) % self.every == 0:
            if self.mode == "raise":
                raise ValueError(f"verifier bug on task {task['n']}")
            if self.mode == "hang":
                time.sleep(3600)
            if self.mode == "die":
                os._exit(3)
            if self.mode == "nan":
                return Score(reward=float("nan"))
            if self.mode == "inf_metric":
                return Score(reward=1.0, metrics={"ok": float("inf")})
        return Score(reward=1.0, metrics={"ok": 1.0})
