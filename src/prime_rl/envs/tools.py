"""Tools for tool-using environments: typed Python functions, OpenAI-style calls, results as data.

A tool is a plain (sync or async) function with type hints and a docstring::

    def add(a: int, b: int = 0) -> int:
        \"\"\"Add two integers.

        Args:
            a: the first number
            b: the second number
        \"\"\"

:meth:`Tool.from_function` derives its OpenAI spec (``{"type": "function", "function": {name,
description, parameters}}``) from the signature: pydantic builds the JSON schema (and later
validates the arguments against the same model), so the schema and the validation cannot
disagree. Parameters need annotations pydantic can express as JSON (str, int, float, bool,
lists, dicts, Literal, optional); others raise :class:`ToolError` naming the function and the
parameter.

:class:`ToolBox` runs the calls of a model turn (``tool_calls`` entries). Whatever happens is a
:class:`ToolResult` with a reason (``ok``, ``unknown_tool``, ``bad_arguments``, ``raised``,
``timeout``), never an exception, and its :meth:`ToolResult.message` is the ``tool`` message the
model reads back, errors included. A synchronous tool runs in a thread: past its timeout the call
is answered with the error but the thread cannot be stopped, so code that may loop or eat memory
belongs in the sandbox (:func:`python_tool`), whose process group is killed.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pydantic

Reason = Literal["ok", "unknown_tool", "bad_arguments", "raised", "timeout"]


class ToolError(TypeError):
    """A function cannot be a tool (names the function and the parameter)."""


@dataclass(frozen=True)
class ToolResult:
    content: str
    reason: Reason
    ms: float = 0.0

    @property
    def ok(self) -> bool:
        return self.reason == "ok"

    def message(self, tool_call_id: str) -> dict[str, str]:
        return {"role": "tool", "tool_call_id": tool_call_id, "content": self.content}


def _doc(fn: Callable) -> tuple[str, dict[str, str]]:
    """The first paragraph of the docstring, and ``Args:`` descriptions per parameter."""
    doc = inspect.getdoc(fn) or ""
    summary = doc.split("\n\n")[0].strip()
    args: dict[str, str] = {}
    section = re.search(r"^Args:\s*\n((?:[ \t]+.*\n?)+)", doc, re.M)
    if section:
        for line in section.group(1).splitlines():
            m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.+)", line)
            if m:
                args[m.group(1)] = m.group(2).strip()
    return summary, args


def _strip_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if k != "title"}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    fn: Callable[..., Any]
    model: type[pydantic.BaseModel]
    """Validates a call's arguments (built from the signature, like ``parameters``)."""

    @classmethod
    def from_function(cls, fn: Callable[..., Any], name: str | None = None) -> Tool:
        name = name or fn.__name__
        summary, arg_docs = _doc(fn)
        fields: dict[str, Any] = {}
        for p in inspect.signature(fn).parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise ToolError(f"tool {name!r}: *{p.name} / **{p.name} cannot be described to a model")
            if p.annotation is inspect.Parameter.empty:
                raise ToolError(f"tool {name!r}: parameter {p.name!r} has no type annotation")
            default = ... if p.default is inspect.Parameter.empty else p.default
            fields[p.name] = (p.annotation, pydantic.Field(default, description=arg_docs.get(p.name)))
        try:
            model = pydantic.create_model(
                f"{name}_arguments", __config__=pydantic.ConfigDict(extra="forbid"), **fields
            )
            schema = _strip_titles(model.model_json_schema())
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError, TypeError) as e:
            raise ToolError(f"tool {name!r}: a parameter's type cannot be a JSON schema: {e}") from e
        if "$defs" in schema:
            raise ToolError(f"tool {name!r}: nested models are not supported as parameter types")
        schema.setdefault("properties", {})
        return cls(name, summary or name, schema, fn, model)

    def openai_spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


def tool(fn: Callable[..., Any]) -> Tool:
    """Decorator form of :meth:`Tool.from_function`."""
    return Tool.from_function(fn)


class ToolBox:
    """Tools by name; runs ``tool_calls`` entries with a per-call wall-clock limit."""

    def __init__(self, tools: Sequence[Tool | Callable[..., Any]], timeout_s: float = 30.0):
        self.tools: dict[str, Tool] = {}
        for t in tools:
            t = t if isinstance(t, Tool) else Tool.from_function(t)
            if t.name in self.tools:
                raise ToolError(f"two tools are named {t.name!r}")
            self.tools[t.name] = t
        self.timeout_s = timeout_s

    def specs(self) -> list[dict[str, Any]]:
        return [t.openai_spec() for t in self.tools.values()]

    async def acall(self, tool_call: dict[str, Any]) -> ToolResult:
        start = time.monotonic()

        def done(content: str, reason: Reason) -> ToolResult:
            return ToolResult(content, reason, (time.monotonic() - start) * 1000.0)

        fn_part = tool_call.get("function") or {}
        name = fn_part.get("name")
        t = self.tools.get(name) if isinstance(name, str) else None
        if t is None:
            return done(f"error: unknown tool {name!r} (known: {', '.join(self.tools)})", "unknown_tool")
        raw = fn_part.get("arguments", "{}")
        try:
            args = json.loads(raw) if isinstance(raw, str) else raw
            if not isinstance(args, dict):
                raise ValueError("the arguments must be a JSON object")
            values = dict(t.model.model_validate(args))
        except (ValueError, pydantic.ValidationError) as e:
            problem = str(e).replace("\n", "; ")[:500]
            return done(f"error: bad arguments for {t.name}: {problem}", "bad_arguments")
        try:
            if inspect.iscoroutinefunction(t.fn):
                out = await asyncio.wait_for(t.fn(**values), self.timeout_s)
            else:
                out = await asyncio.wait_for(asyncio.to_thread(t.fn, **values), self.timeout_s)
        except TimeoutError:
            return done(f"error: {t.name} took over {self.timeout_s:g}s and was stopped", "timeout")
        except Exception as e:  # a tool bug is told to the model and recorded, never a crash
            return done(f"error: {t.name} raised {type(e).__name__}: {e}", "raised")
        return done(out if isinstance(out, str) else json.dumps(out, default=str), "ok")

    def call(self, tool_call: dict[str, Any]) -> ToolResult:
        """:meth:`acall` for synchronous callers (an environment's ``step`` in a worker)."""
        return asyncio.run(self.acall(tool_call))

    def answer(
        self, tool_calls: Sequence[dict[str, Any]]
    ) -> tuple[list[dict[str, str]], float, tuple[str, ...]]:
        """Run a turn's calls in order: their ``tool`` messages, the time they took (ms) and the
        reasons of those that failed."""
        messages, ms, errors = [], 0.0, []
        for i, call in enumerate(tool_calls):
            result = self.call(call)
            messages.append(result.message(str(call.get("id") or f"call_{i}")))
            ms += result.ms
            if not result.ok:
                errors.append(result.reason)
        return messages, ms, tuple(errors)


def python_tool(**limits: float) -> Tool:
    """The sandboxed Python tool (:mod:`prime_rl.envs.sandbox`), named ``python``."""
    from prime_rl.envs.sandbox import run_python_async

    async def python(code: str) -> str:
        """Run Python code in a sandbox (no network, limited time and memory) and return what it
        printed.

        Args:
            code: a Python program; print what you want to see
        """
        return (await run_python_async(code, **limits)).text()  # type: ignore[arg-type]

    return Tool.from_function(python)
