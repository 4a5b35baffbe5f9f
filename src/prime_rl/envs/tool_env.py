"""Tool-using environments: the model calls tools until it answers, then the answer is scored.

:class:`ToolEnv` is the base: a subclass names its tools (:meth:`ToolEnv.toolbox`) and scores the
final answer (:meth:`~prime_rl.envs.base.Environment.score`). Each model turn with ``tool_calls``
gets one ``tool`` message per call (results and errors alike, see
:class:`prime_rl.envs.tools.ToolBox`); the first turn without a call is the answer and ends the
episode. The specs are sent with the first request (:meth:`tool_specs`).

``math_tool`` (:class:`MathToolEnv`): the ``math`` environment's question/answer JSONL, with the
sandboxed ``python`` tool, scored by ``math-verify`` on the final answer.
"""

from __future__ import annotations

from typing import Any

from prime_rl.envs.base import Environment, Task, Turn
from prime_rl.envs.math_qa import MathQAEnv
from prime_rl.envs.sandbox import python_tool
from prime_rl.envs.tools import ToolBox


class ToolEnv(Environment):
    """Options of subclasses: ``max_turns`` (model turns, tool calls included; default 8)."""

    max_turns = 8

    def toolbox(self, task: Task) -> ToolBox:
        raise NotImplementedError

    def tool_specs(self, task: Task) -> list[dict[str, Any]]:
        return self.toolbox(task).specs()

    def step(self, task: Task, messages: list[dict[str, Any]]) -> Turn:
        last = messages[-1]
        calls = last.get("tool_calls")
        if not calls:
            return Turn.end(self.score(task, last.get("content") or ""))
        replies, ms, errors = self.toolbox(task).answer(calls)
        return Turn.reply(*replies, tool_ms=ms, tool_errors=errors)


MATH_TOOL_SYSTEM = (
    "Solve the problem. You may run Python with the python tool to compute; "
    "when you are done, give the final answer in \\boxed{} without calling a tool."
)


class MathToolEnv(ToolEnv, MathQAEnv):
    """Options: those of ``math`` (``path``, ``system_prompt``, ``shuffle``), ``max_turns``
    (default 8), and the sandbox's ``cpu_s`` (5), ``memory_mb`` (512), ``wall_s`` (10)."""

    def __init__(
        self,
        path: str | None = None,
        system_prompt: str = MATH_TOOL_SYSTEM,
        shuffle: bool = True,
        max_turns: int = 8,
        cpu_s: float = 5.0,
        memory_mb: int = 512,
        wall_s: float = 10.0,
    ):
        if not isinstance(max_turns, int) or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        MathQAEnv.__init__(self, path, system_prompt, shuffle)
        self.max_turns = max_turns
        self._tools = ToolBox(
            [python_tool(cpu_s=cpu_s, memory_mb=memory_mb, wall_s=wall_s)], timeout_s=wall_s + 5
        )

    def toolbox(self, task: Task) -> ToolBox:
        return self._tools
