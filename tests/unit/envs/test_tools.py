"""Typed tools: the JSON schema a model sees, and every way a call can go (as data, never raised)."""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import signal
import time
from typing import Annotated, Any, Literal, Optional

import pydantic
import pytest

from prime_rl.envs.registry import load_env
from prime_rl.envs.sandbox import python_tool
from prime_rl.envs.tools import Tool, ToolBox, ToolError, ToolResult, tool


def add(a: int, b: float = 0.5, mode: Literal["sum", "max"] = "sum", tags: list[str] | None = None) -> float:
    """Add two numbers.

    More text that is not the description.

    Args:
        a: the first number
        b (float): the second number,
            described on two lines
    Returns:
        the sum
    """
    return a + b if mode == "sum" else max(a, b)


def test_the_schema_comes_from_the_signature_and_the_docstring():
    spec = Tool.from_function(add).openai_spec()
    fn = spec["function"]
    assert spec["type"] == "function" and fn["name"] == "add" and fn["description"] == "Add two numbers."
    params = fn["parameters"]
    assert params["type"] == "object" and params["required"] == ["a"]
    assert params["additionalProperties"] is False
    props = params["properties"]
    assert props["a"] == {"type": "integer", "description": "the first number"}
    assert props["b"] == {
        "type": "number",
        "default": 0.5,
        "description": "the second number, described on two lines",
    }
    assert props["mode"] == {"type": "string", "enum": ["sum", "max"], "default": "sum"}
    assert props["tags"] == {
        "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}],
        "default": None,
    }
    assert "title" not in json.dumps(spec) and "Returns" not in json.dumps(spec)


def test_every_supported_type_has_its_json_schema():
    def kinds(
        s: str,
        i: int,
        f: float,
        flag: bool,
        ints: list[int],
        scores: dict[str, float],
        nested: dict[str, list[Literal[1, 2]]],
        maybe: Optional[str],  # noqa: UP045 - the spelling under test
        level: Annotated[int, pydantic.Field(ge=0)] = 1,
    ) -> None:
        """Kinds.

        A second paragraph."""

    t = Tool.from_function(kinds)
    props = t.parameters["properties"]
    assert props["s"] == {"type": "string"} and props["i"] == {"type": "integer"}
    assert props["f"] == {"type": "number"} and props["flag"] == {"type": "boolean"}
    assert props["ints"] == {"type": "array", "items": {"type": "integer"}}
    assert props["scores"] == {"type": "object", "additionalProperties": {"type": "number"}}
    assert props["nested"]["additionalProperties"] == {
        "type": "array",
        "items": {"type": "integer", "enum": [1, 2]},
    }
    assert props["maybe"] == {"anyOf": [{"type": "string"}, {"type": "null"}]}
    assert props["level"] == {"type": "integer", "minimum": 0, "default": 1}
    assert t.parameters["required"] == ["s", "i", "f", "flag", "ints", "scores", "nested", "maybe"]
    assert t.description == "Kinds."


def test_names_descriptions_and_parameters_that_shadow_pydantic_attributes():
    @tool
    def lookup(schema: str, json: str = "x", model_config: int = 0) -> str:
        """Look up a schema."""
        return f"{schema}/{json}/{model_config}"

    assert isinstance(lookup, Tool) and list(lookup.parameters["properties"]) == [
        "schema",
        "json",
        "model_config",
    ]
    box = ToolBox([lookup])
    assert box.call(call("lookup", {"schema": "s", "model_config": 2})).content == "s/x/2"
    nothing = Tool.from_function(lambda: 1, name="one", description="Return one.")
    assert nothing.openai_spec()["function"] == {
        "name": "one",
        "description": "Return one.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    }


def test_functions_that_cannot_be_described_are_refused_by_name():
    def untyped(x):
        return x

    def star(*xs: int):
        return xs

    def positional(x: int, /):
        return x

    def when(day: datetime.date):
        return day

    def bare(xs: list):
        return xs

    def keys(m: dict[int, str]):
        return m

    def anything(x: Any):
        return x

    def nested(x: list[set[int]]):
        return x

    def local_type(x: Later):  # noqa: F821 - a name that does not exist
        return x

    with pytest.raises(ToolError, match="'untyped': parameter 'x' has no type annotation"):
        Tool.from_function(untyped)
    with pytest.raises(ToolError, match=r"'star': parameter \*xs"):
        Tool.from_function(star)
    with pytest.raises(ToolError, match="'positional': parameter 'x' is positional-only"):
        Tool.from_function(positional)
    with pytest.raises(
        ToolError, match=r"'when': parameter 'day' has an unsupported type .*date.*supported: str"
    ):
        Tool.from_function(when)
    with pytest.raises(ToolError, match="'bare': parameter 'xs' .* list without item types"):
        Tool.from_function(bare)
    with pytest.raises(ToolError, match="'keys': parameter 'm' .*dict keys must be str"):
        Tool.from_function(keys)
    with pytest.raises(ToolError, match="'anything': parameter 'x' has an unsupported type Any"):
        Tool.from_function(anything)
    with pytest.raises(ToolError, match=r"'nested': parameter 'x' has an unsupported type set\[int\]"):
        Tool.from_function(nested)
    with pytest.raises(ToolError, match="'local_type': cannot read its signature"):
        Tool.from_function(local_type)
    with pytest.raises(ToolError, match="tool name 'two words'"):
        Tool.from_function(add, name="two words")
    with pytest.raises(ToolError, match="two tools are named 'add'"):
        ToolBox([add, add])


def call(name: str, arguments: Any, call_id: str = "c1") -> dict:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def boom(x: int) -> int:
    """Raise."""
    raise RuntimeError(f"broken on {x}")


async def aboom(x: int) -> int:
    """Raise, asynchronously."""
    raise TimeoutError("the tool's own timeout is not the call's")


def sleepy(s: float) -> str:
    """Sleep in a thread."""
    time.sleep(s)
    return "woke"


async def asleep(s: float) -> str:
    """Sleep on the loop."""
    await asyncio.sleep(s)
    return "woke"


BOX = ToolBox([add, boom, aboom, sleepy, asleep], timeout_s=30)
"""A timeout no call that should finish comes near, however loaded the machine."""
LATE = ToolBox([sleepy, asleep], timeout_s=0.3)
"""The timeout the timeout test passes: its tools sleep 60 s."""


def test_a_call_that_works_is_ok_with_its_output_as_the_tool_message():
    ok = BOX.call(call("add", {"a": 2, "b": 3}))
    assert isinstance(ok, ToolResult) and (ok.ok, ok.error, ok.reason, ok.content) == (
        True,
        None,
        "ok",
        "5.0",
    )
    assert ok.ms > 0 and ok.message("c1") == {"role": "tool", "tool_call_id": "c1", "content": "5.0"}
    assert BOX.call(call("add", {"a": "7", "mode": "max"})).content == "7"  # "7" is coerced to 7
    assert BOX.call(call("asleep", {"s": 0})).content == "woke"
    assert BOX.call(call("add", {"a": 1, "tags": ["x"]})).ok


def test_an_unknown_tool_is_an_error_naming_the_known_ones():
    r = BOX.call(call("sub", {}))
    assert (r.ok, r.reason) == (False, "unknown_tool")
    assert r.content == "error: unknown tool 'sub' (known: add, boom, aboom, sleepy, asleep)"
    assert r.error == r.content.removeprefix("error: ")
    assert BOX.call({"id": "x", "type": "function"}).reason == "unknown_tool"


def test_bad_arguments_say_what_is_wrong():
    malformed = BOX.call(call("add", '{"a": 1,'))
    assert malformed.reason == "bad_arguments" and "not valid JSON" in malformed.content
    wrong = BOX.call(call("add", {"a": "seven", "tags": ["ok", 3]}))
    assert wrong.reason == "bad_arguments" and wrong.content.startswith("error: bad arguments for add: ")
    assert "a: Input should be a valid integer" in wrong.content and "(got 'seven')" in wrong.content
    assert "tags.1: Input should be a valid string" in wrong.content
    assert "missing required argument 'a'" in BOX.call(call("add", {"b": 1})).content
    extra = BOX.call(call("add", {"a": 1, "c": 2}))
    assert "unexpected argument 'c' (parameters: a, b, mode, tags)" in extra.content
    assert "must be a JSON object" in BOX.call(call("add", "[1, 2]")).content
    assert BOX.call(call("add", {"a": 1, "mode": "min"})).reason == "bad_arguments"  # not in the Literal


def test_a_raising_tool_is_reported_with_the_exception():
    raised = BOX.call(call("boom", {"x": 3}))
    assert (raised.reason, raised.content) == ("raised", "error: boom raised RuntimeError: broken on 3")
    own_timeout = BOX.call(call("aboom", {"x": 1}))
    assert own_timeout.reason == "raised" and "TimeoutError: the tool's own timeout" in own_timeout.content


@pytest.mark.parametrize("name", ["sleepy", "asleep"])
def test_a_tool_past_its_timeout_is_answered_at_the_timeout(name):
    start = time.monotonic()
    late = LATE.call(call(name, {"s": 60}))
    assert late.reason == "timeout" and "did not finish within 0.3s" in late.content
    assert time.monotonic() - start < 10  # a sync tool's thread is abandoned, not waited for


def test_call_from_inside_a_running_loop_and_acall():
    async def go():
        return BOX.call(call("add", {"a": 1})), await BOX.acall(call("add", {"a": 2}))

    inside, awaited = asyncio.run(go())
    assert (inside.content, awaited.content) == ("1.5", "2.5")


def test_a_turns_calls_are_answered_in_order():
    messages, ms, errors = BOX.answer(
        [call("add", {"a": 1}, "x"), call("nope", {}, "y"), call("boom", {"x": 0}, "z")]
    )
    assert [m["tool_call_id"] for m in messages] == ["x", "y", "z"] and all(
        m["role"] == "tool" for m in messages
    )
    assert errors == ("unknown_tool", "raised") and ms > 0


def test_the_python_tool_runs_code_in_the_sandbox():
    t = python_tool(wall_s=5)
    fn = t.openai_spec()["function"]
    assert fn["name"] == "python" and fn["description"].startswith(
        "Run Python code and return its stdout/stderr."
    )
    assert fn["parameters"]["required"] == ["code"]
    box = ToolBox([t], timeout_s=10)
    assert box.call(call("python", {"code": "print(6 * 7)"})).content == "42"
    failed = box.call(call("python", {"code": "1/0"}))
    assert failed.ok and "ZeroDivisionError" in failed.content and "[error:" in failed.content


def test_a_python_call_past_the_tool_timeout_kills_the_sandbox(tmp_path):
    # 5 s: the sandbox's Python has started and written the marker by then on a loaded machine too
    box = ToolBox([python_tool(wall_s=60)], timeout_s=5.0)
    marker = tmp_path / "pgid"
    code = f"import os, time\nopen({str(marker)!r}, 'w').write(str(os.getpgid(0)))\ntime.sleep(120)"
    start = time.monotonic()
    r = box.call(call("python", {"code": code}))
    assert r.reason == "timeout" and time.monotonic() - start < 15  # not the sandbox's 60 s
    with pytest.raises(ProcessLookupError):
        os.killpg(int(marker.read_text()), signal.SIGKILL)


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
