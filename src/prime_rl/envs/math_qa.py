"""``math``: question/answer JSONL datasets, verified with ``math-verify``.

Each line: ``{"question": "...", "answer": "..."}`` (``id`` optional). The completion's final
answer (the last ``\\boxed{...}``, else the whole text) is parsed and compared symbolically with
the reference answer. Options: ``path`` (required), ``system_prompt``, ``shuffle`` (default true).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from prime_rl.envs.base import EnvError, Environment, Score, Task, read_jsonl_tasks, user_prompt

DEFAULT_SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."


class MathQAEnv(Environment):
    required_fields = ("answer",)

    def __init__(self, path: str | None = None, system_prompt: str = DEFAULT_SYSTEM, shuffle: bool = True):
        # without a path it only scores (offline collection reads the tasks itself)
        self.rows = read_jsonl_tasks(Path(path), required=("question", "answer")) if path else None
        self.system_prompt = system_prompt
        self.shuffle = shuffle

    def prompt(self, task: Task) -> list[dict]:
        if isinstance(task.get("question"), str) and not any(k in task for k in ("prompt", "messages")):
            return user_prompt(task["question"], self.system_prompt)
        return super().prompt(task)

    def tasks(self, seed: int) -> Iterator[Task]:
        if self.rows is None:
            raise EnvError(
                "environment 'math' needs the option 'path' (a JSONL file of question/answer lines)"
            )
        return self._epochs(seed)

    def _epochs(self, seed: int) -> Iterator[Task]:
        assert self.rows is not None
        rng = random.Random(seed)
        epoch = 0
        while True:
            order = list(range(len(self.rows)))
            if self.shuffle:
                rng.shuffle(order)
            for i in order:
                row = self.rows[i]
                yield {
                    "id": f"{row['id']}@{epoch}",
                    "prompt": user_prompt(str(row["question"]), self.system_prompt),
                    "answer": str(row["answer"]),
                }
            epoch += 1

    def score(self, task: Task, completion: str) -> Score:
        from math_verify import parse, verify

        gold = parse(f"${task['answer']}$") or parse(task["answer"])
        pred = parse(completion)
        correct = bool(gold and pred and verify(gold, pred))
        return Score(
            reward=1.0 if correct else 0.0,
            metrics={"accuracy": float(correct), "parsed": float(bool(pred))},
            answer=str(pred[-1]) if pred else None,
        )
