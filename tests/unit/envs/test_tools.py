"""Typed tools: the JSON schema a model sees, and every way a call can go (as data, never raised)."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Literal

import pytest

from prime_rl.envs.registry import load_env
from prime_rl.envs.tools import Tool, ToolBox, ToolError


def add(a: int, b: float = 0.5, mode: Literal["sum", "max"] = "sum", tags: list[str] | None = None) -> float:
    """Add two numbers.

    More text that is not the description.

    Args:
        a: the first number
        b: the second number
    """
    return a + b if mode == "sum" else max(a, b)


def test_the_schema_comes_from_the_signature_and_the_docstring():
    spec = Tool.from_function(add).openai_spec()
    fn = spec["function"]
    assert spec["type"] == "function" and fn["name"] == "add" and fn["description"] == "Add two numbers."
    params = fn["parameters"]
    assert (
        params["type"] == "object" and params["required"] == ["a"] and params["additionalProperties"] is False
    )
    props = params["properties"]
    assert props["a"] == {"type": "integer", "description": "the first number"}
    assert props["b"] == {"type": "number", "default": 0.5, "description": "the second number"}
    assert props["mode"] == {"type": "string", "enum": ["sum", "max"], "default": "sum"}
    assert props["tags"]["anyOf"] == [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]
    assert "title" not in json.dumps(spec)


def test_functions_that_cannot_be_described_are_refused_by_name():
    def untyped(x):
        return x

    def star(*xs: int):
        return xs

    with pytest.raises(ToolError, match="'untyped': parameter 'x' has no type annotation"):
        Tool.from_function(untyped)
    with pytest.raises(ToolError, match="'star'"):
        Tool.from_function(star)
    with pytest.raises(ToolError, match="two tools are named 'add'"):
        ToolBox([add, add])


def call(name: str, arguments) -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}


def test_every_outcome_of_a_call_is_a_result_with_its_reason():
    def boom(x: int) -> int:
        """Raise."""
        raise RuntimeError(f"broken on {x}")

    async def slow(x: int) -> int:
        """Sleep."""
        await asyncio.sleep(5)
        return x

    box = ToolBox([add, boom, slow], timeout_s=0.2)
    ok = box.call(call("add", {"a": 2, "b": 3}))
    assert (ok.reason, ok.content) == ("ok", "5.0")
    assert ok.message("c1") == {"role": "tool", "tool_call_id": "c1", "content": "5.0"}
    unknown = box.call(call("sub", {}))
    assert unknown.reason == "unknown_tool" and "known: add, boom, slow" in unknown.content
    assert box.call(call("add", '{"a": 1,')).reason == "bad_arguments"
    wrong = box.call(call("add", {"a": "seven"}))
    assert wrong.reason == "bad_arguments" and "a" in wrong.content and wrong.content.startswith("error:")
    assert box.call(call("add", {"a": 1, "c": 2})).reason == "bad_arguments"  # no unknown arguments
    assert box.call(call("add", "[1, 2]")).reason == "bad_arguments"
    raised = box.call(call("boom", {"x": 3}))
    assert raised.reason == "raised" and "RuntimeError: broken on 3" in raised.content
    start = time.monotonic()
    late = box.call(call("slow", {"x": 1}))
    assert late.reason == "timeout" and time.monotonic() - start < 2


def test_the_math_tool_env_answers_python_calls_then_scores_the_final_answer(tmp_path):
    data = tmp_path / "math.jsonl"
    data.write_text(json.dumps({"question": "What is 6 times 7?", "answer": "42"}) + "\n")
    env = load_env("math_tool", {"path": str(data), "max_turns": 4})
    task = next(env.tasks(0))
    assert [s["function"]["name"] for s in env.tool_specs(task)] == ["python"]
    asked = task["prompt"] + [
        {"role": "assistant", "content": "", "tool_calls": [call("python", {"code": "print(6 * 7)"})]}
    ]
    turn = env.step(task, asked)
    assert not turn.done and turn.messages[0]["content"].strip() == "42" and turn.tool_ms > 0
    bad = env.step(
        task, task["prompt"] + [{"role": "assistant", "content": "", "tool_calls": [call("sh", {})]}]
    )
    assert bad.tool_errors == ("unknown_tool",)
    final = env.step(task, asked + list(turn.messages) + [{"role": "assistant", "content": "\\boxed{42}"}])
    assert final.done and final.score.reward == 1.0
