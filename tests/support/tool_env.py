"""A two-tool environment for tests: ``add`` and ``mul`` on small integers.

The model (forced by a ``structured_outputs`` regex in tests, since the tiny random model writes
no tool calls of its own) calls a tool each turn; the environment runs the call and answers with
a ``tool`` message. The episode ends when both tools have been called (reward 1) or at
``max_turns`` (reward = distinct tools used / 2). Tool failures (an unknown tool, bad arguments)
are answered to the model and recorded in ``tool_errors``.
"""

from __future__ import annotations

import json
from typing import Any

from prime_rl.envs.base import Environment, Score, Task, Turn, user_prompt

TOOLS = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b}
CALL_REGEX = r'<tool_call>\{"name": "(add|mul)", "arguments": \{"a": [1-9], "b": [1-9]\}\}</tool_call>'
"""What the tests force every turn to be: one call of either tool."""


def spec(name: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} two integers",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }


class TwoToolEnv(Environment):
    def __init__(self, max_turns: int = 4):
        self.max_turns = max_turns

    def tasks(self, seed: int):
        i = 0
        while True:
            yield {"id": f"tools-{seed}-{i}", "prompt": user_prompt("Use both tools, add and mul.")}
            i += 1

    def tool_specs(self, task: Task) -> list[dict[str, Any]]:
        return [spec(name) for name in TOOLS]

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        used = {c["function"]["name"] for m in messages for c in m.get("tool_calls") or []} & set(TOOLS)
        calls = messages[-1].get("tool_calls") or []
        turns = sum(m["role"] == "assistant" for m in messages)
        if used == set(TOOLS) or not calls or turns >= self.max_turns:
            return Turn.end(Score(len(used) / 2, {"tools_used": float(len(used))}))
        replies, errors = [], []
        for call in calls:
            fn = TOOLS.get(call["function"]["name"])
            try:
                args = json.loads(call["function"]["arguments"])
                content = str(fn(**args)) if fn else f"error: unknown tool {call['function']['name']!r}"
            except (ValueError, TypeError) as e:
                content = f"error: bad arguments ({e})"
            if content.startswith("error"):
                errors.append(content)
            replies.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        return Turn.reply(*replies, tool_errors=tuple(errors))

    def score(self, task: Task, completion: str) -> Score:
        return Score(0.0)
