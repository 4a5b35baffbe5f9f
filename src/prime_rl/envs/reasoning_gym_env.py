"""``reasoning_gym``: procedurally generated reasoning tasks from the ``reasoning-gym`` package.

Nothing is downloaded: tasks are generated locally from a seed and scored with the dataset's
own ``score_answer``. Options: ``dataset`` (e.g. ``basic_arithmetic``, ``leg_counting``),
``size`` (tasks per epoch, default 1000), ``config`` (dataset options), ``system_prompt``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prime_rl.envs.base import EnvError, Environment, Score, Task, user_prompt

DEFAULT_SYSTEM = "Answer with the final answer only."


class ReasoningGymEnv(Environment):
    def __init__(
        self,
        dataset: str = "basic_arithmetic",
        size: int = 1000,
        config: dict[str, Any] | None = None,
        system_prompt: str = DEFAULT_SYSTEM,
    ):
        self.dataset_name, self.size, self.config, self.system_prompt = (
            dataset,
            size,
            dict(config or {}),
            system_prompt,
        )
        self._scorers: dict[int, Any] = {}
        self._make(0)  # fail early, with the dataset named, if it does not exist

    def _make(self, seed: int):
        import reasoning_gym

        if seed not in self._scorers:
            try:
                self._scorers[seed] = reasoning_gym.create_dataset(
                    self.dataset_name, seed=seed, size=self.size, **self.config
                )
            except Exception as e:
                raise EnvError(f"reasoning_gym dataset {self.dataset_name!r} with {self.config}: {e}") from e
        return self._scorers[seed]

    required_fields = ("rg_seed", "rg_index")

    def tasks(self, seed: int) -> Iterator[Task]:
        epoch = 0
        while True:
            ds = self._make(seed + epoch)
            for i in range(len(ds)):
                entry = ds[i]
                yield {
                    "id": f"rg-{self.dataset_name}-{seed + epoch}-{i}",
                    "prompt": user_prompt(entry["question"], self.system_prompt),
                    "answer": entry["answer"],
                    "rg_seed": seed + epoch,
                    "rg_index": i,
                }
            epoch += 1

    def score(self, task: Task, completion: str) -> Score:
        ds = self._make(int(task["rg_seed"]))
        entry = ds[int(task["rg_index"])]
        reward = float(ds.score_answer(answer=completion.strip(), entry=entry))
        return Score(reward=reward, metrics={"accuracy": float(reward >= 1.0)})
