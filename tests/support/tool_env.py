"""A two-tool environment for tests: ``add`` and ``mul`` on small integers (a :class:`ToolEnv`).

The model (forced by a ``structured_outputs`` regex in tests, since the tiny random model writes
no tool calls of its own) calls a tool each turn; the tool box runs it and answers with a ``tool``
message (errors included). The episode ends when both tools have been called (reward 1), at a
turn without a call, or at ``max_turns`` (reward = distinct tools used / 2).
"""

from __future__ import annotations

from typing import Any

from prime_rl.envs.base import Score, Task, Turn, user_prompt
from prime_rl.envs.tool_env import ToolEnv
from prime_rl.envs.tools import ToolBox


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def mul(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


TOOLS = {"add": add, "mul": mul}
CALL_REGEX = r'<tool_call>\{"name": "(add|mul)", "arguments": \{"a": [1-9], "b": [1-9]\}\}</tool_call>'
"""What the tests force every turn to be: one call of either tool."""


class TwoToolEnv(ToolEnv):
    def __init__(self, max_turns: int = 4):
        self.max_turns = max_turns
        self._box = ToolBox([add, mul], timeout_s=5)

    def tasks(self, seed: int):
        i = 0
        while True:
            yield {"id": f"tools-{seed}-{i}", "prompt": user_prompt("Use both tools, add and mul.")}
            i += 1

    def toolbox(self, task: Task) -> ToolBox:
        return self._box

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        used = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or []} & set(TOOLS)
        turns = sum(m["role"] == "assistant" for m in messages)
        if used == set(TOOLS) or turns >= self.max_turns or not messages[-1].get("tool_calls"):
            return Turn.end(Score(len(used) / 2, {"tools_used": float(len(used))}))
        return super().step(task, messages)  # the tool box answers the calls

    def score(self, task: Task, completion: str) -> Score:
        """Not used: :meth:`step` scores the tools used, not an answer text."""
        return Score(0.0)
