"""``guess``: a higher/lower guessing game, a multi-turn task the tiny demo model learns on a CPU.

The environment picks one of the first ``high`` letters of the alphabet (a number from 1 to
``high``, written as a letter: a random model writes letters all the time and digits almost
never, so it gets a learning signal from the first step). The model answers with a guess and
hears "Later." or "Earlier." (in the alphabet) until it is right or its turns (``max_turns``)
are used up. The reward favours solving in few turns, and pays a little for guesses in range::

    reward = 0.8 * solved * (1 - (turn_solved - 1) / max_turns) + 0.2 * valid_answers / turns

An answer's guess is its first letter; an answer without one, or with one out of range, hears
"Answer with one letter from a to {last}." (and counts as a turn). Configured in
``configs/debug/rl_guess.toml``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from typing import Any

from prime_rl.envs.base import Environment, Score, Task, Turn, user_prompt

_LETTER = re.compile(r"[A-Za-z]")


def first_guess(text: str) -> int | None:
    """The answer's guess: its first letter as a number (a=1, b=2, ...), None without one."""
    found = _LETTER.search(text)
    return ord(found.group().lower()) - ord("a") + 1 if found else None


class GuessEnv(Environment):
    """Options: ``high`` (int, default 8, at most 26): the secret is one of the first ``high``
    letters; ``max_turns`` (default 4)."""

    def __init__(self, high: int = 8, max_turns: int = 4):
        for name, value in (("high", high), ("max_turns", max_turns)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 2 <= high <= 26:
            raise ValueError(f"high must be within 2..26 (letters a..z), got {high}")
        self.high = high
        self.max_turns = max_turns

    def tasks(self, seed: int) -> Iterator[Task]:
        rng = random.Random(seed)
        i = 0
        while True:
            secret = rng.randint(1, self.high)
            text = f"I picked a letter from a to {self.last}. Guess it: answer with one letter."
            yield {"id": f"guess-{seed}-{i}", "prompt": user_prompt(text), "secret": secret}
            i += 1

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        answers = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        guesses = [first_guess(a) for a in answers]
        valid = sum(g is not None and 1 <= g <= self.high for g in guesses)
        turns, guess, secret = len(answers), guesses[-1], int(task["secret"])
        if guess == secret or turns >= self.max_turns:
            solved = guess == secret
            reward = 0.8 * solved * (1 - (turns - 1) / self.max_turns) + 0.2 * valid / turns
            return Turn.end(
                Score(reward, {"solved": float(solved), "turns": float(turns), "valid": valid / turns})
            )
        if guess is None or not 1 <= guess <= self.high:
            return Turn.reply({"role": "user", "content": f"Answer with one letter from a to {self.last}."})
        return Turn.reply({"role": "user", "content": "Later." if guess < secret else "Earlier."})

    @property
    def last(self) -> str:
        return chr(ord("a") + self.high - 1)

    def score(self, task: Task, completion: str) -> Score:
        """A one-turn game: the answer alone (used by ``collect-rollouts`` on single answers)."""
        return self.step(task, [{"role": "assistant", "content": completion}]).score or Score(0.0)
