"""``toy``: a task a random-initialised tiny model learns within a few dozen steps on a CPU.

Every prompt asks for vowel-rich text; the reward is the fraction of letters in the completion
that are vowels (a, e, i, o, u). A random model already emits some vowels, so the reward has
variance within each group from the first step (GRPO needs that), and the policy can raise it
steadily by preferring vowel-heavy tokens, which shows up as a rising reward curve in the demo.

With ``max_letters`` the answer is meant to be one word: a completion with more letters than
that earns 0. The demo (``configs/debug/rl.toml``) adds stop strings (``sampling.stop = [" ",
"\n"]``: the answer ends at its first space or newline) and ``truncated_reward = 0``: an answer
cut off at ``max_tokens`` earns nothing whatever it scores. Without that last part two of our runs
collapsed onto long cut-off answers (every completion truncated): an answer with few letters
among other characters stays under ``max_letters`` and can still score well.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from prime_rl.envs.base import Environment, Score, Task, user_prompt

VOWELS = set("aeiouAEIOU")
_PHRASES = [
    "Write a word with as many vowels as you can.",
    "Say something that sounds like aaa eee ooo.",
    "Reply using vowels: a, e, i, o, u.",
    "Make a vowel-rich name, number {n}.",
]


def vowel_fraction(text: str) -> tuple[float, int]:
    letters = [c for c in text if c.isalpha()]
    if not letters:
        return 0.0, 0
    return sum(c in VOWELS for c in letters) / len(letters), len(letters)


class VowelEnv(Environment):
    """Options: ``max_letters`` (int, default none): letters an answer may have to earn anything."""

    def __init__(self, max_letters: int | None = None):
        if max_letters is not None and (not isinstance(max_letters, int) or max_letters < 1):
            raise ValueError(f"max_letters must be a positive integer, got {max_letters!r}")
        self.max_letters = max_letters

    def tasks(self, seed: int) -> Iterator[Task]:
        rng = random.Random(seed)
        i = 0
        while True:
            text = rng.choice(_PHRASES).format(n=rng.randrange(1000))
            yield {"id": f"toy-{seed}-{i}", "prompt": user_prompt(text)}
            i += 1

    def score(self, task: Task, completion: str) -> Score:
        frac, letters = vowel_fraction(completion)
        reward = frac
        if self.max_letters is not None and letters > self.max_letters:
            reward = 0.0
        return Score(reward=reward, metrics={"vowel_frac": frac, "letters": float(letters)})
