"""Small hand-made data shared by unit tests."""

from __future__ import annotations

SAMPLES = [
    {
        "prompt_ids": [5, 6],
        "completion_ids": [7, 8, 9],
        "completion_logprobs": [-1.0, -2.0, -0.5],
        "advantage": 1.0,
    },
    {"prompt_ids": [10], "completion_ids": [11, 12], "completion_logprobs": [-0.1, -0.2], "advantage": -0.5},
    {"prompt_ids": [3, 4, 5], "completion_ids": [6], "completion_logprobs": [-3.0], "advantage": 0.0},
]
"""Three rollout samples (prompt, completion, logprobs, advantage) of different lengths."""


def rec(task: int, repeat: int, reward: float | None, text: str = "", **extra) -> dict:
    """One collector output record (task, repeat, reward, response text, any extra keys)."""
    return {
        "task_index": task,
        "repeat_index": repeat,
        "task": {"q": task},
        "response": {"text": text},
        "reward": reward,
        **extra,
    }
