"""``math``: question/answer JSONL datasets, verified with ``math-verify``.

Each line: ``{"question": "...", "answer": "..."}`` (``id`` optional). The completion's final
answer (the last ``\\boxed{...}``, else the whole text) is parsed and compared symbolically with
the reference answer. Options: ``path`` (required), ``system_prompt``, ``shuffle`` (default true).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from prime_rl.envs.base import EnvError, Environment, Score, Task, read_jsonl_tasks, register, user_prompt

DEFAULT_SYSTEM = "Solve the problem. Put the final answer in \\boxed{}."


@register("math")
class MathQAEnv(Environment):
    def __init__(self, path: str | None = None, system_prompt: str = DEFAULT_SYSTEM, shuffle: bool = True):
        if not path:
            raise EnvError(
                "environment 'math' needs the option 'path' (a JSONL file of question/answer lines)"
            )
        self.rows = read_jsonl_tasks(Path(path), required=("question", "answer"))
        self.system_prompt = system_prompt
        self.shuffle = shuffle

    def tasks(self, seed: int) -> Iterator[Task]:
        rng = random.Random(seed)
        epoch = 0
        while True:
            order = list(range(len(self.rows)))
            if self.shuffle:
                rng.shuffle(order)
            for i in order:
                row = self.rows[i]
                yield {"id": f"{row['id']}@{epoch}", "prompt": user_prompt(str(row["question"]), self.system_prompt),
                       "answer": str(row["answer"])}  # fmt: skip
            epoch += 1

    def score(self, task: Task, completion: str) -> Score:
        from math_verify import parse, verify

        gold = parse(f"${task['answer']}$") or parse(task["answer"])
        pred = parse(completion)
        correct = bool(gold and pred and verify(gold, pred))
        return Score(
            reward=1.0 if correct else 0.0, metrics={"accuracy": float(correct), "parsed": float(bool(pred))}
        )
